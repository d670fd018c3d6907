// A server that died is told from one that never started: a real `parley serve --backend scripted` at
// PARLEY_DOOMED_URL is killed (SIGKILL) in the middle of a turn, when onEvent asks PARLEY_KILL_URL for it
// (tests/clients/kill_switch.py), and PARLEY_CLOSED_URL is a port nobody listens on.
// tests/clients/test_js_client.py starts the server and the switch, and sets these variables.

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { ParleyClient, ParleyError } from "../parley-client.mjs";

const DOOMED = process.env.PARLEY_DOOMED_URL;
const KILL = process.env.PARLEY_KILL_URL;
const CLOSED = process.env.PARLEY_CLOSED_URL;
const QUESTION = "How many arrows are there?"; // the scripted backend calls check_stock on it, and waits
const OPTIONS = { timeout: 60000 };
const TRIES = 3;

/** A client of `url` that records the requests it makes ("METHOD path"). */
function recordingClient(url) {
  const requests = [];
  const client = new ParleyClient(url, {
    resume: { tries: TRIES, delayMs: 10 },
    fetch: (to, init) => {
      requests.push(`${init?.method} ${new URL(to).pathname}`);
      return fetch(to, init);
    },
  });
  return { client, requests };
}

/** The ParleyError `promise` rejects with. @param {Promise<unknown>} promise */
async function rejection(promise) {
  let caught;
  await assert.rejects(promise, (error) => (caught = error) instanceof ParleyError);
  return caught;
}

describe("a server that died is told from one that never started", { skip: !DOOMED && "PARLEY_DOOMED_URL is not set" }, () => {
  test("a server killed mid-turn: server_gone, the line handed back; the next request: unavailable", OPTIONS, async () => {
    const { client, requests } = recordingClient(DOOMED);
    const npc = await client.createSession("tool_calling.json");
    const kinds = [];
    let killed = null;
    const gone = await rejection(client.turn(npc.id, QUESTION, {
      onEvent: (event) => {
        kinds.push(event.kind);
        // the turn waits for the tool's result: the server dies there, its stream open
        if (event.kind === "tool_request") killed ??= fetch(KILL, { method: "POST" });
      },
    }));
    assert.equal((await killed)?.status, 204, "the kill switch answered once the server was gone");
    assert.equal(gone.code, "server_gone", gone.message);
    assert.equal(gone.line, QUESTION);
    assert.match(gone.message, /say the line again/);
    assert.equal(kinds[0], "turn_started");
    assert.equal(kinds.at(-1), "tool_request");
    assert.equal(requests.filter((r) => r.includes("/runs/")).length, TRIES, requests.join("\n"));
    const after = await rejection(client.health()); // a new request reaches no server: never started, as far as it goes
    assert.equal(after.code, "unavailable", after.message);
  });

  test("a server that never started: unavailable at once, nothing resumed", OPTIONS, async () => {
    const { client, requests } = recordingClient(CLOSED);
    const health = await rejection(client.health());
    assert.equal(health.code, "unavailable", health.message);
    const turn = await rejection(client.turn("innkeeper", QUESTION));
    assert.equal(turn.code, "unavailable", turn.message);
    assert.deepEqual(requests, ["GET /v1/health", "POST /v1/sessions/innkeeper/turns"]);
  });
});
