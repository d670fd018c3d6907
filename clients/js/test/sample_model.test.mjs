// One turn of the example chat agent on the real sample model, at PARLEY_MODEL_URL (a
// `parley serve --backend embedded --assets resources/examples` that tests/clients/test_js_client.py
// starts for its model test). Skipped without it, so `node --test` alone needs no model.

import assert from "node:assert/strict";
import { test } from "node:test";

import { ParleyClient } from "../parley-client.mjs";

const SERVER = process.env.PARLEY_MODEL_URL;

test("a chat.json turn on the sample model", { skip: !SERVER && "PARLEY_MODEL_URL is not set", timeout: 300000 }, async () => {
  const client = new ParleyClient(SERVER);
  const session = await client.createSession("chat.json", { variables: { player_name: "Rowan" } });
  try {
    const tokens = [];
    const finished = await client.turn(session.id, "Hello! Is there a room free tonight?", {
      onEvent: (event) => {
        if (event.kind === "token") tokens.push(event.data.text);
      },
    });
    assert.ok(finished.reply.trim().length > 0, "the reply is empty");
    assert.ok(tokens.length > 0, "no token events streamed");
    assert.deepEqual(finished.path, ["reply"]);
    assert.equal((await client.getSession(session.id)).turns, 1);
  } finally {
    await client.deleteSession(session.id);
  }
});
