// The SSE parser on its own: any split of the bytes, any line end, gives the same events.

import assert from "node:assert/strict";
import { test } from "node:test";

import { EventStreamParser, ParleyError } from "../parley-client.mjs";

const STREAM =
  ": watching\n\n" +
  'event: turn_started\ndata: {"session":"npc","turn":0,"line":"Hé 🏹?"}\n\n' +
  ": keep-alive\n\n" +
  'event: token\ndata: {"node":"reply","text":"a:b"}\n\n' +
  'event:turn_finished\ndata: {"reply":\ndata: "two lines"}\n\n';
const EXPECTED = [
  { kind: "turn_started", data: { session: "npc", turn: 0, line: "Hé 🏹?" } },
  { kind: "token", data: { node: "reply", text: "a:b" } },
  { kind: "turn_finished", data: { reply: "two lines" } },
];

/** Parses `bytes` fed in pieces cut at `cuts`, decoding as a stream (a character may be split too). */
function parse(bytes, cuts) {
  const parser = new EventStreamParser();
  const decoder = new TextDecoder();
  const events = [];
  let from = 0;
  for (const cut of [...cuts, bytes.length]) {
    events.push(...parser.feed(decoder.decode(bytes.slice(from, cut), { stream: true })));
    from = cut;
  }
  events.push(...parser.feed(decoder.decode()), ...parser.end());
  return events;
}

for (const [name, ending] of [["\\n", "\n"], ["\\r\\n", "\r\n"], ["\\r", "\r"]]) {
  test(`events with ${name} line ends, whole and cut at every byte`, () => {
    const bytes = new TextEncoder().encode(STREAM.replaceAll("\n", ending));
    assert.deepEqual(parse(bytes, []), EXPECTED);
    for (let cut = 1; cut < bytes.length; cut++) assert.deepEqual(parse(bytes, [cut]), EXPECTED, `cut at ${cut}`);
    assert.deepEqual(parse(bytes, [...Array(bytes.length).keys()].slice(1)), EXPECTED, "one byte at a time");
  });
}

test("an event still without its blank line when the stream ends is dropped", () => {
  const bytes = new TextEncoder().encode('event: token\ndata: {"text":"x"}\n\nevent: token\ndata: {"text":"y"}\n');
  assert.deepEqual(parse(bytes, []), [{ kind: "token", data: { text: "x" } }]);
});

test("data that is not JSON is a ParleyError naming the event", () => {
  const parser = new EventStreamParser();
  assert.throws(() => parser.feed("event: token\ndata: {oops\n\n"), (error) => {
    assert.ok(error instanceof ParleyError);
    assert.equal(error.code, "bad_answer");
    assert.match(error.message, /token/);
    return true;
  });
});
