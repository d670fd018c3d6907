// A turn whose stream breaks mid-turn is resumed: against a real `parley serve --backend scripted` behind
// the test's cutting proxy at PARLEY_PROXY_URL (tests/clients/cutting_proxy.py), which breaks the stream
// of a turn of a session named cut.KIND.*, half.KIND.* or lost.KIND.* at its first KIND event; PARLEY_URL
// is the server itself, PARLEY_OTHER_URL a second server, which lost.* sessions' resumes reach and which
// does not know their runs. tests/clients/test_js_client.py starts all three.

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { ParleyClient, ParleyError } from "../parley-client.mjs";

const PROXY = process.env.PARLEY_PROXY_URL;
const OTHER = process.env.PARLEY_OTHER_URL;
const TOKEN = process.env.PARLEY_TOKEN;
const QUESTION = "How many arrows are there?"; // the scripted backend calls check_stock on it
const OPTIONS = { timeout: 60000 };

/** A client through the proxy that records the requests it makes ("METHOD path last-event-id"). */
function recordingClient(options = {}) {
  const requests = [];
  const client = new ParleyClient(PROXY ?? "http://127.0.0.1:9", {
    token: TOKEN,
    fetch: (url, init) => {
      const resumeFrom = init?.headers?.["last-event-id"];
      requests.push(`${init?.method} ${new URL(url).pathname}${resumeFrom ? ` from ${resumeFrom}` : ""}`);
      return fetch(url, init);
    },
    ...options,
  });
  return { client, requests };
}

/** A turn's events and tool calls, through `client`. */
async function turn(client, id, line, options = {}) {
  const events = [];
  const calls = [];
  const finished = await client.turn(id, line, {
    tools: (request) => {
      calls.push(request.tool);
      return "240 arrows, counted twice";
    },
    onEvent: (event) => events.push(event),
    ...options,
  });
  return { events, calls, finished };
}

/**
 * What two runs of the same turn in sessions of the same asset share: each event's kind and data, as
 * JSON, without what names the run or the call, and with the session's id (which the scripted backend's
 * replies hold) as SESSION.
 */
function comparable(events, id) {
  return events.map(({ kind, data }) => {
    const { run: _run, session: _session, call_id: _call, ...rest } = data;
    return JSON.stringify({ kind, ...rest }).replaceAll(id, "SESSION");
  });
}

describe("a turn whose stream breaks is resumed", { skip: !PROXY && "PARLEY_PROXY_URL is not set" }, () => {
  for (const [name, how] of [
    ["a stream cut after its tool_request", "cut"],
    ["a stream cut in the middle of its tool_request", "half"],
  ]) {
    test(`${name} resumes: the whole turn arrives once, as an unbroken turn's`, OPTIONS, async () => {
      const { client, requests } = recordingClient();
      const whole = await client.createSession("tool_calling.json", { id: `whole.${how}.js` });
      const unbroken = await turn(client, whole.id, QUESTION);
      const broken = await client.createSession("tool_calling.json", { id: `${how}.tool_request.js` });
      const resumed = await turn(client, broken.id, QUESTION);

      const resumes = requests.filter((r) => r.includes("/runs/"));
      assert.equal(resumes.length, 1, requests.join("\n"));
      const run = resumed.events[0].data.run;
      const ids = resumed.events.map((e) => e.id);
      assert.deepEqual(ids, ids.map((_, i) => `${run}.${i + 1}`), "every event once, in order");
      const before = Number(resumes[0].split(" from ")[1].split(".")[1]);
      const kinds = resumed.events.map((e) => e.kind);
      // cut: the tool_request had arrived before the break; half: half of it had, which the client dropped
      assert.equal(kinds[how === "cut" ? before - 1 : before], "tool_request");
      assert.deepEqual(resumed.calls, ["check_stock"], "the tool request answered once, by the same callback");
      // byte for byte what the unbroken turn said (turn_finished's diagnostics hold timings)
      assert.deepEqual(comparable(resumed.events.slice(0, -1), broken.id), comparable(unbroken.events.slice(0, -1), whole.id));
      assert.equal(resumed.finished.reply.replaceAll(broken.id, "SESSION"), unbroken.finished.reply.replaceAll(whole.id, "SESSION"));
      assert.deepEqual(resumed.finished.path, unbroken.finished.path);
      const text = (events) => events.filter((e) => e.kind === "token" && e.data.node === "reply").map((e) => e.data.text).join("");
      assert.equal(text(resumed.events), resumed.finished.reply, "the tokens say the reply, with nothing twice");
      assert.equal((await client.getSession(broken.id)).turns, 1);
    });
  }

  test("a resume that reaches a server that does not know the run ends in turn_lost, the line handed back", OPTIONS, async () => {
    const { client, requests } = recordingClient();
    const id = "lost.turn_started.js";
    await client.createSession("chat.json", { id });
    // the same session on the other server (a replica that did not run the turn: it knows no run of it)
    await new ParleyClient(OTHER ?? "http://127.0.0.1:9", { token: TOKEN }).createSession("chat.json", { id });
    const kinds = [];
    let caught;
    await assert.rejects(
      client.turn(id, "Hello, innkeeper", { onEvent: (event) => kinds.push(event.kind) }),
      (error) => (caught = error) instanceof ParleyError,
    );
    assert.equal(caught.code, "turn_lost", caught.message);
    assert.equal(caught.line, "Hello, innkeeper");
    assert.match(caught.message, /server stopped before the turn finished.*say the line again/);
    assert.deepEqual(kinds, ["turn_started"]);
    assert.equal(requests.filter((r) => r.includes("/runs/")).length, 1, "unknown_run is not tried again");
  });

  test("cancelOnDisconnect: the broken stream is not resumed, and the server cancels the turn", OPTIONS, async () => {
    const { client, requests } = recordingClient();
    const id = "cut.tool_request.cancel.js";
    await client.createSession("tool_calling.json", { id });
    const ended = [];
    let turnOver;
    const over = new Promise((resolve) => (turnOver = resolve));
    const watch = await client.watch(id, {
      onEvent: (event) => {
        if (event.kind === "turn_failed" || event.kind === "turn_finished") {
          ended.push(event);
          turnOver();
        }
      },
    });
    let caught;
    await assert.rejects(
      client.turn(id, QUESTION, { cancelOnDisconnect: true, onEvent: () => {} }),
      (error) => (caught = error) instanceof ParleyError,
    );
    assert.equal(caught.code, "stream_ended", caught.message);
    assert.equal(caught.line, QUESTION);
    await over;
    watch.close();
    assert.equal(ended[0].kind, "turn_failed");
    assert.equal(ended[0].data.error.code, "cancelled");
    assert.equal(ended[0].data.line, QUESTION);
    assert.equal(requests.filter((r) => r.includes("/runs/")).length, 0, requests.join("\n"));
    assert.equal((await client.getSession(id)).turns, 0);
  });
});
