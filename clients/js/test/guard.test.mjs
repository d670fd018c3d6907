// What a game reacts to, against the scripted server at PARLEY_URL (tests/clients/test_js_client.py starts
// one on resources/examples): Mira the herbalist (quest_giver.json) has a Guard on the player's line and a
// game event, quest_complete, on her reward. A guarded line sends `guarded` and the turn's `guard` names
// the policy and exit; the game's answer to check_inventory reaches `game_event`; a plain line sends neither.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { ParleyClient } from "../parley-client.mjs";

const SERVER = process.env.PARLEY_URL;
const TOKEN = process.env.PARLEY_TOKEN;
const OPTIONS = { timeout: 60000 };
const NARRATION = "(Suddenly her two brothers appear and hand her the moonpetals)";
const TURN_IN = "Here, I turn in the moonpetals."; // the scripted classifier routes it to turn_in
const NO_GUARD = { policy: "", exit: "", node: "" };

describe("a game reacting to the herbalist's guard and quest (quest_giver.json)", { skip: !SERVER && "PARLEY_URL is not set" }, () => {
  const client = new ParleyClient(SERVER ?? "http://127.0.0.1:9", { token: TOKEN });
  /** @type {import("../parley-client.mjs").Session} */
  let session;

  before(async () => {
    session = await client.createSession("quest_giver.json");
  });

  after(async () => {
    if (session) await client.deleteSession(session.id).catch(() => {});
  });

  test("a narrated line is guarded: the event and the turn name the policy and its exit", OPTIONS, async () => {
    const events = [];
    const done = await client.turn(session.id, NARRATION, { onEvent: (event) => events.push(event) });
    const guarded = events.filter((e) => e.kind === "guarded").map((e) => e.data);
    assert.equal(guarded.length, 1);
    assert.equal(guarded[0].node, "gate");
    assert.equal(guarded[0].policy, "narration");
    assert.equal(guarded[0].exit, "policy:narration");
    assert.equal(guarded[0].check, "patterns");
    assert.equal(guarded[0].checked, "line");
    assert.match(guarded[0].why, /appear/);
    assert.deepEqual(done.guard, { policy: "narration", exit: "policy:narration", node: "gate" });
    assert.deepEqual(done.game_events, []);
    assert.match(done.reply, /Stories won't fill my basket/);
    const kept = await client.getTurn(session.id, done.turn_id);
    assert.deepEqual(kept.guard, done.guard);
  });

  test("the game's answer completes the quest: a game_event, and the turn lists it", OPTIONS, async () => {
    const events = [];
    const done = await client.turn(session.id, TURN_IN, {
      tools: () => JSON.stringify({ item: "moonpetal", count: 3 }),
      onEvent: (event) => events.push(event),
    });
    assert.deepEqual(events.filter((e) => e.kind === "game_event").map((e) => e.data),
      [{ node: "reward", name: "quest_complete", exit: "" }]);
    assert.deepEqual(done.game_events, ["quest_complete"]);
    // the bag check is a Tool Call whose "enough" outcome leads to the reward: no guard fired
    assert.deepEqual(done.guard, NO_GUARD);
  });

  test("a plain line sends neither, and the turn's guard is empty", OPTIONS, async () => {
    const kinds = [];
    const done = await client.turn(session.id, "What do you need from me?", { onEvent: (e) => kinds.push(e.kind) });
    assert.ok(!kinds.includes("guarded") && !kinds.includes("game_event"), kinds.join(" "));
    assert.deepEqual(done.guard, NO_GUARD);
    assert.deepEqual(done.game_events, []);
  });
});
