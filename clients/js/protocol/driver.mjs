// The JS client's driver for the protocol test set (clients/protocol/README.md): runs each step of
// conversation.json through ParleyClient and prints `step N JSON`. Runs in Node (node.mjs) and in a
// browser page (tests/clients/test_js_browser.py), so it uses nothing but the client and the platform.

import { ParleyError } from "../parley-client.mjs";

const WAIT_MS = 20000; // a wait's deadline: past it the step fails instead of hanging

/** `value` with "{client}" replaced by `name` in every string. */
export function named(value, name) {
  if (typeof value === "string") return value.replaceAll("{client}", name);
  if (Array.isArray(value)) return value.map((item) => named(item, name));
  if (value && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, named(item, name)]));
  }
  return value;
}

/** A promise and its resolve. */
function signalled() {
  let resolve;
  const promise = new Promise((r) => (resolve = r));
  return { promise, resolve };
}

function within(promise, what) {
  let timer;
  const deadline = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), WAIT_MS);
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

/** One turn's observation, as clients/protocol/README.md defines it. */
class Seen {
  constructor() {
    Object.assign(this, { tools: [], shown: "", reply: "", spoken: [], queued: false, tags: {}, error: "", line: "" });
    this.wasQueued = signalled();
  }

  onEvent = (event) => {
    if (event.kind === "token" && event.data.reply === true) this.shown += event.data.text;
    else if (event.kind === "speak") this.spoken.push(event.data.text);
    else if (event.kind === "tag") this.tags[event.data.name] = event.data.value;
    else if (event.kind === "turn_queued") {
      this.queued = true;
      this.wasQueued.resolve();
    }
  };

  async run(client, session, line, tools) {
    try {
      this.reply = (await client.turn(session, line, { tools, onEvent: this.onEvent })).reply;
    } catch (error) {
      if (!(error instanceof ParleyError)) throw error;
      this.error = error.code;
      this.line = error.line;
    }
    return this;
  }

  json() {
    const { tools, shown, reply, spoken, queued, tags, error, line } = this;
    return { tools, shown, reply, spoken, queued, tags, error, line };
  }
}

function answering(seen, answers) {
  return (request) => {
    seen.tools.push(request.tool);
    return answers[request.tool] ?? "unknown tool";
  };
}

async function say(client, step) {
  const seen = new Seen();
  const answer = answering(seen, step.tools ?? {});
  if (step.cancel_at === "tool_request") {
    const cancelling = async (request) => {
      answer(request);
      await client.cancel(step.session);
      return "cancelled"; // the server has stopped waiting: the client drops it (unknown_call)
    };
    return (await seen.run(client, step.session, step.line, cancelling)).json();
  }
  return (await seen.run(client, step.session, step.line, answer)).json();
}

async function doubleText(client, step) {
  const first = new Seen();
  const second = new Seen();
  const answers = step.tools ?? {};
  const answerFirst = answering(first, answers);
  let talking;
  const firstTools = async (request) => {
    talking = second.run(client, step.session, step.second, answering(second, answers)); // the player speaks again
    await within(second.wasQueued.promise, "the second line to be queued");
    return answerFirst(request);
  };
  await first.run(client, step.session, step.line, firstTools);
  await within(talking, "the second turn");
  return { first: first.json(), second: second.json() };
}

async function run(client, step) {
  switch (step.do) {
    case "health":
      return { status: (await client.health()).status };
    case "create": {
      const made = await client.createSession(step.asset, { id: step.session });
      return { session: made.id, turns: made.turns };
    }
    case "say":
      return say(client, step);
    case "double_text":
      return doubleText(client, step);
    case "history": {
      const turns = await client.listTurns(step.session);
      return { turns: turns.length, lines: turns.map((t) => t.line) };
    }
    case "delete":
      await client.deleteSession(step.session);
      return { deleted: true };
    default:
      throw new Error(`unknown step ${step.do}`);
  }
}

/**
 * Runs `script` (conversation.json's contents) as client `name`, handing each output line to `print`.
 * @param {import("../parley-client.mjs").ParleyClient} client @param {any} script @param {string} name
 * @param {(line: string) => void} print
 */
export async function runProtocol(client, script, name, print) {
  const steps = named(script.steps, name);
  for (const [n, step] of steps.entries()) {
    let seen;
    try {
      seen = await run(client, step);
    } catch (error) {
      if (!(error instanceof ParleyError)) throw error;
      seen = { error: error.code };
    }
    print(`step ${n} ${JSON.stringify(seen)}`);
  }
  print("protocol done");
}
