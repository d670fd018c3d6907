// A game that cannot send its child SIGTERM stops the server by request: a real `parley serve
// --backend scripted` at PARLEY_SERVE_URL, started with the token PARLEY_TOKEN, is stopped by
// shutdown() while a turn waits for a tool result; that turn ends cancelled ("shutting down"), and a
// request without the token is refused first. tests/clients/test_js_client.py starts the server.

import assert from "node:assert/strict";
import { test } from "node:test";

import { ParleyClient, ParleyError } from "../parley-client.mjs";

const URL_ = process.env.PARLEY_SERVE_URL;
const TOKEN = process.env.PARLEY_TOKEN;

test("shutdown() needs the token, cancels the running turn and answers the limit", { skip: !URL_ && "PARLEY_SERVE_URL is not set", timeout: 60000 }, async () => {
  await assert.rejects(new ParleyClient(URL_).shutdown(), (e) => e instanceof ParleyError && e.code === "unauthorized");
  const client = new ParleyClient(URL_, { token: TOKEN, resume: { tries: 0 } });
  const npc = await client.createSession("tool_calling.json");
  let seconds;
  const ended = client.turn(npc.id, "How many arrows are there?", {
    onEvent: (event) => {
      if (event.kind === "tool_request" && seconds === undefined) seconds = client.shutdown();
    },
  });
  await assert.rejects(ended, (e) => e instanceof ParleyError && e.code === "cancelled" && /shutting down/.test(e.message));
  assert.equal(await seconds, 2);
});
