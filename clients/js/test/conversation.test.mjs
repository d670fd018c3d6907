// A scripted conversation against a real `parley serve --backend scripted --assets resources/examples`
// at PARLEY_URL, with the token PARLEY_TOKEN (tests/clients/test_js_client.py starts one): tool calls
// answered by the client, a cancel while a tool call waits, errors, an observer's watch stream and the
// session's other routes.
// The tests of one describe() run in order and share one session, as a game's conversation would.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { ParleyClient, ParleyError } from "../parley-client.mjs";

const SERVER = process.env.PARLEY_URL;
const TOKEN = process.env.PARLEY_TOKEN; // the server's --token-env token, when it was started with one
const QUESTION = "How many arrows are there?"; // the scripted backend calls check_stock on it
const WAIT_MS = 20000; // a wait's deadline: past it the test fails instead of hanging
const OPTIONS = { timeout: 60000 };

/** A promise and its resolve, for "wait until an event arrives". */
function signalled() {
  let resolve;
  const promise = new Promise((r) => (resolve = r));
  return { promise, resolve };
}

/** Waits for `promise`, failing with `what` past the deadline. */
async function within(promise, what) {
  let timer;
  const deadline = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), WAIT_MS);
  });
  try {
    return await Promise.race([promise, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

/** Polls `check` until it holds or the deadline passes (the server's side of a closed connection). */
async function until(check, what) {
  const end = Date.now() + WAIT_MS;
  for (;;) {
    if (await check()) return;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Runs `run`, expecting it to reject with a ParleyError of `code`; returns the error. */
async function rejectsWith(run, code) {
  let caught;
  await assert.rejects(run, (error) => {
    caught = error;
    return true;
  });
  assert.ok(caught instanceof ParleyError, `not a ParleyError: ${caught}`);
  assert.equal(caught.code, code, caught.message);
  return caught;
}

/**
 * A fetch that hands the real answer's body on in 1- to 3-byte chunks with "\r\n" line ends, so an
 * event, a line and a "\r\n" are split between reads.
 */
function choppyFetch(chunkSizes = [1, 2, 3]) {
  return async (url, init) => {
    const real = await fetch(url, init);
    if (!real.body || !(real.headers.get("content-type") ?? "").startsWith("text/event-stream")) return real;
    const source = real.body.getReader();
    let pending = new Uint8Array(0);
    let turn = 0;
    const body = new ReadableStream({
      async pull(controller) {
        while (pending.length === 0) {
          const { value, done } = await source.read();
          if (done) return controller.close();
          const text = new TextDecoder().decode(value).replaceAll("\n", "\r\n");
          pending = new TextEncoder().encode(text);
        }
        const size = chunkSizes[turn++ % chunkSizes.length];
        controller.enqueue(pending.slice(0, size));
        pending = pending.slice(size);
      },
      cancel(reason) {
        return source.cancel(reason);
      },
    });
    return new Response(body, { status: real.status, headers: real.headers });
  };
}

describe("a conversation with the quartermaster (tool_calling.json)", { skip: !SERVER && "PARLEY_URL is not set" }, () => {
  const client = new ParleyClient(SERVER ?? "http://127.0.0.1:9", { token: TOKEN });
  /** @type {import("../parley-client.mjs").Session} */
  let session;

  before(async () => {
    const health = await client.health();
    assert.equal(health.status, "ok");
    assert.match(health.backend, /scripted/);
    assert.ok((await client.assets()).some((a) => a.path === "tool_calling.json"));
    session = await client.createSession("tool_calling.json");
    assert.equal(session.turns, 0);
  });

  after(async () => {
    if (session) await client.deleteSession(session.id).catch(() => {});
  });

  test("a turn whose tool call the client answers", OPTIONS, async () => {
    const events = [];
    const requests = [];
    const finished = await client.turn(session.id, QUESTION, {
      tools: async (request) => {
        requests.push(request);
        return "240 arrows, counted twice";
      },
      onEvent: (event) => events.push(event),
    });
    assert.equal(requests.length, 1);
    assert.equal(requests[0].tool, "check_stock");
    assert.deepEqual(requests[0].arguments, { item: "there" });
    assert.match(finished.reply, /240 arrows, counted twice/);
    const kinds = events.map((e) => e.kind);
    for (const kind of ["turn_started", "node_started", "tool_request", "tool_call", "node_finished", "turn_finished"]) {
      assert.ok(kinds.includes(kind), `no ${kind} in ${kinds.join(" ")}`);
    }
    assert.equal(kinds[0], "turn_started");
    assert.equal(kinds.at(-1), "turn_finished");
    assert.ok(kinds.indexOf("tool_request") < kinds.indexOf("tool_call"));
    const call = events.find((e) => e.kind === "tool_call").data;
    assert.equal(call.result, "240 arrows, counted twice");
    assert.deepEqual(events.at(-1).data, finished);
    assert.equal((await client.getSession(session.id)).turns, 1);
  });

  test("a turn cancelled while it waits for the tool result", OPTIONS, async () => {
    let cancelled = null;
    const kinds = [];
    const error = await rejectsWith(
      () =>
        client.turn(session.id, QUESTION, {
          onEvent: (event) => {
            kinds.push(event.kind);
            if (event.kind === "tool_request") cancelled = client.cancel(session.id);
          },
        }),
      "cancelled",
    );
    assert.equal(await cancelled, true);
    assert.equal(kinds.at(-1), "turn_failed");
    assert.ok(!kinds.includes("tool_call"), kinds.join(" "));
    assert.equal(error.status, 200);
    const after = await client.getSession(session.id);
    assert.equal(after.turns, 1);
    assert.equal(after.busy, false);
    assert.equal(await client.cancel(session.id), false); // nothing runs now
  });

  test("a turn cancelled elsewhere does not wait for its tool's answer", OPTIONS, async () => {
    let answer;
    const pending = new Promise((resolve) => (answer = resolve));
    await rejectsWith(
      () =>
        client.turn(session.id, QUESTION, {
          tools: () => pending, // the game is still looking it up when the player walks away
          onEvent: (event) => {
            if (event.kind === "tool_request") void client.cancel(session.id);
          },
        }),
      "cancelled",
    );
    answer("too late"); // posted after the turn ended: refused by the server, and nobody is told
    assert.equal((await client.getSession(session.id)).turns, 1);
  });

  test("a tool that throws after its turn ended leaves the next turn alone", OPTIONS, async () => {
    const requests = []; // what this client sends, recorded as fetch is called
    const recording = new ParleyClient(SERVER, {
      token: TOKEN,
      fetch: (url, init) => {
        requests.push(`${init?.method} ${new URL(url).pathname}`);
        return fetch(url, init);
      },
    });
    let fail;
    const pending = new Promise((_, reject) => (fail = reject));
    await rejectsWith(
      () =>
        recording.turn(session.id, QUESTION, {
          tools: () => pending,
          onEvent: (event) => {
            if (event.kind === "tool_request") void client.cancel(session.id); // another client stops it
          },
        }),
      "cancelled",
    );
    const asked = signalled();
    let answer;
    const next = client.turn(session.id, QUESTION, {
      tools: () => {
        asked.resolve();
        return new Promise((resolve) => (answer = resolve));
      },
    });
    await within(asked.promise, "the next turn's tool_request");
    const before = requests.length;
    fail(new Error("the lookup failed, late"));
    // the client handles the rejection in microtasks; a macrotask later, any request it makes has been started
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(requests.slice(before), []);
    answer("3 arrows");
    assert.match((await next).reply, /3 arrows/);
    assert.equal((await client.rewind(session.id, 1)).turns, 1);
  });

  test("a tool that throws cancels the turn and rejects with tool_error", OPTIONS, async () => {
    const error = await rejectsWith(
      () =>
        client.turn(session.id, QUESTION, {
          tools: async () => {
            throw new Error("the stores are locked");
          },
        }),
      "tool_error",
    );
    assert.match(error.message, /check_stock.*the stores are locked/);
    await until(async () => !(await client.getSession(session.id)).busy, "the session to be idle");
    assert.equal((await client.getSession(session.id)).turns, 1);
  });

  test("regenerating while a turn waits for its tool is refused as busy", OPTIONS, async () => {
    const asked = signalled();
    let answer;
    const first = client.turn(session.id, QUESTION, {
      tools: (request) => {
        asked.resolve(request);
        return new Promise((resolve) => (answer = resolve));
      },
    });
    await within(asked.promise, "the first turn's tool_request");
    // (a second line would wait in the queue: the asset's double_text; a regenerate is refused)
    const busy = await rejectsWith(() => client.regenerate(session.id, 0), "busy");
    assert.equal(busy.status, 409);
    answer("12 arrows");
    assert.match((await first).reply, /12 arrows/);
    assert.equal((await client.getSession(session.id)).turns, 2);
  });

  test("events split across reads and \\r\\n line ends parse the same", OPTIONS, async () => {
    const choppy = new ParleyClient(SERVER, { token: TOKEN, fetch: choppyFetch() });
    const kinds = [];
    const finished = await choppy.turn(session.id, QUESTION, {
      tools: async () => "7 arrows",
      onEvent: (event) => kinds.push(event.kind),
    });
    assert.match(finished.reply, /7 arrows/);
    assert.equal(kinds[0], "turn_started");
    assert.equal(kinds.at(-1), "turn_finished");
    assert.ok(kinds.includes("tool_call"));
    assert.equal((await client.getSession(session.id)).turns, 3);
  });

  test("a turn stopped by its signal rejects with aborted and leaves the session as it was", OPTIONS, async () => {
    const controller = new AbortController();
    await rejectsWith(
      () =>
        client.turn(session.id, QUESTION, {
          signal: controller.signal,
          onEvent: (event) => {
            if (event.kind === "tool_request") controller.abort();
          },
        }),
      "aborted",
    );
    await until(async () => !(await client.getSession(session.id)).busy, "the server to stop the turn");
    assert.equal((await client.getSession(session.id)).turns, 3);
  });

  test("a request without the token is refused as unauthorized", { ...OPTIONS, skip: !TOKEN && "PARLEY_TOKEN is not set" }, async () => {
    const stranger = new ParleyClient(SERVER);
    const error = await rejectsWith(() => stranger.getSession(session.id), "unauthorized");
    assert.equal(error.status, 401);
    await rejectsWith(() => stranger.turn(session.id, QUESTION), "unauthorized");
    await rejectsWith(() => new ParleyClient(SERVER, { token: "wrong" }).health(), "unauthorized");
  });

  test("unknown sessions are ParleyErrors with the server's code", OPTIONS, async () => {
    const error = await rejectsWith(() => client.getSession("no-such-npc"), "unknown_session");
    assert.equal(error.status, 404);
    assert.match(error.message, /no-such-npc/);
    await rejectsWith(() => client.turn("no-such-npc", "Hello"), "unknown_session");
    await rejectsWith(() => client.watch("no-such-npc"), "unknown_session");
    await rejectsWith(() => client.createSession("no_such_asset.json"), "unknown_asset");
  });

  test("a watch stream sees the events of a turn another request runs", OPTIONS, async () => {
    const seen = [];
    const finished = signalled();
    const watch = await client.watch(session.id, {
      onEvent: (event) => {
        seen.push(event);
        if (event.kind === "turn_finished") finished.resolve();
      },
    });
    const player = new ParleyClient(SERVER, { token: TOKEN }); // the game, while the editor watches
    const ran = [];
    const result = await player.turn(session.id, QUESTION, {
      tools: async () => "99 arrows",
      onEvent: (event) => ran.push(event),
    });
    await within(finished.promise, "the watch stream's turn_finished");
    assert.equal(seen[0].kind, "watching");
    assert.equal(seen[0].data.session, session.id);
    const turn = seen.slice(1);
    assert.deepEqual(turn.map((e) => e.kind), ran.map((e) => e.kind));
    assert.equal(turn[0].kind, "turn_started");
    assert.equal(turn[0].data.line, QUESTION);
    assert.deepEqual(turn.find((e) => e.kind === "tool_request").data.arguments, { item: "there" });
    assert.equal(seen.at(-1).data.reply, result.reply);
    watch.close();
    await within(watch.done, "the closed watch to end");
  });

  test("variables, params, history and rewind", OPTIONS, async () => {
    const undeclared = await rejectsWith(() => client.setVariables(session.id, { arrows: 3 }), "bad_request");
    assert.match(undeclared.message, /arrows/);
    const inn = await client.createSession("chat.json", { variables: { player_name: "Rowan" }, id: "js-inn" });
    assert.equal(inn.id, "js-inn");
    assert.equal(inn.variables.player_name, "Rowan");
    assert.equal((await client.setVariables(inn.id, { time_of_day: "dawn" })).variables.time_of_day, "dawn");
    await rejectsWith(() => client.createSession("chat.json", { id: "js-inn" }), "exists");
    await client.deleteSession(inn.id);
    await client.changeParams(session.id, { reply: { temperature: 0.4, system_prompt: "You count arrows." } });
    const structural = await rejectsWith(() => client.changeParams(session.id, { reply: { context_size: 64 } }), "structural_change");
    assert.equal(structural.status, 409);
    await rejectsWith(() => client.changeParams(session.id, { nobody: { temperature: 0.1 } }), "unknown_node");

    const turns = (await client.getSession(session.id)).turns;
    const lines = await client.listTurns(session.id);
    assert.equal(lines.length, turns);
    assert.equal((await client.getTurn(session.id, lines[0].turn_id)).line, QUESTION);
    const history = await client.exportHistory(session.id);
    assert.equal((await client.rewind(session.id, 1)).turns, 1);
    assert.equal((await client.importHistory(session.id, history)).turns, turns);
    const bad = await rejectsWith(() => client.importHistory(session.id, { format: "not a history" }), "bad_history");
    assert.equal(bad.status, 422);
    assert.ok(Array.isArray(bad.problems));
  });

  test("a deleted session is gone, and its watchers' streams end", OPTIONS, async () => {
    const watch = await client.watch(session.id);
    assert.ok((await client.listSessions()).some((s) => s.id === session.id));
    await client.deleteSession(session.id);
    await within(watch.done, "the watch stream to end");
    assert.ok(!(await client.listSessions()).some((s) => s.id === session.id));
    await rejectsWith(() => client.getSession(session.id), "unknown_session");
    session = null;
  });
});
