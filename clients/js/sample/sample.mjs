// The web sample's NPC: one session, a streamed subtitle of the reply only, the asset's mood and
// gesture tags, a tool the page answers (the game's stock), cancel, and save/load in localStorage.

import { ParleyClient, ParleyError } from "../parley-client.mjs";

const params = new URLSearchParams(location.search);
const client = new ParleyClient(params.get("server") ?? "http://127.0.0.1:8765", { token: params.get("token") ?? undefined });
const asset = params.get("asset") ?? "tool_calling.json";
const $ = (id) => document.getElementById(id);
const STOCK = { arrows: 240, bolts: 12 }; // the game's state, which a Tool Call asks for
const PRICES = { arrows: 2, bolts: 3 }; // silver each

function show(state) {
  $("state").textContent = state;
}

/** The game's side of a Tool Call: the NPC asks, the page answers from its own state. */
function answerTool(request) {
  const item = String(request.arguments.item ?? "").toLowerCase();
  const known = item in STOCK ? item : "arrows"; // a small model may not name the item: the quartermaster's usual
  const answers = {
    check_stock: () => `${STOCK[known]} ${known} in stock`,
    price_of: () => `${PRICES[known]} silver for one of the ${known}`,
  };
  const answer = answers[request.tool]?.() ?? "unknown tool";
  $("game").textContent = `game answered ${request.tool}(${JSON.stringify(request.arguments)}): ${answer}`;
  return answer;
}

let session;
let lastReply = ""; // the subtitle's reply, moved up into the log when the player speaks again

async function say(line) {
  if (lastReply) {
    $("log").insertAdjacentHTML("beforeend", `<div class="said"></div>`);
    $("log").lastElementChild.textContent = `NPC: ${lastReply}`;
    lastReply = "";
  }
  $("log").insertAdjacentHTML("beforeend", `<div class="said"></div>`);
  $("log").lastElementChild.textContent = `You: ${line}`;
  $("subtitle").textContent = "";
  $("tags").textContent = "";
  $("game").textContent = "";
  show("thinking");
  try {
    const done = await client.turn(session.id, line, {
      tools: answerTool,
      onEvent: ({ kind, data }) => {
        if (kind === "token" && data.reply) { // the reply the player sees, never a Tool Call's JSON
          show("speaking");
          $("subtitle").textContent += data.text;
        } else if (kind === "tag") { // the asset's reply_tags: play the animation
          $("tags").insertAdjacentHTML("beforeend", `<span class="tag"></span>`);
          $("tags").lastElementChild.textContent = `${data.name}: ${data.value}`;
        } else if (kind === "tool_request") show("waiting for the game");
      },
    });
    show(`idle (turn ${done.turn + 1})`);
    lastReply = done.reply;
    return done;
  } catch (error) {
    if (!(error instanceof ParleyError)) throw error;
    show(`failed: ${error.code}`);
    if (error.line) document.querySelector("input[name=line]").value = error.line; // say it again
    return { error: error.code };
  }
}

$("talk").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = event.target.elements.line;
  const line = input.value;
  input.value = "";
  if (line.trim()) say(line);
});
$("cancel").addEventListener("click", () => client.cancel(session.id));
$("save").addEventListener("click", async () => {
  localStorage.setItem(`parley:${asset}`, JSON.stringify(await client.exportHistory(session.id)));
  show("saved");
});
$("load").addEventListener("click", async () => {
  const saved = localStorage.getItem(`parley:${asset}`);
  if (saved) await client.importHistory(session.id, JSON.parse(saved));
  show(saved ? "loaded" : "nothing saved");
});

window.sample = (async () => {
  // ?session=ID talks to a session the server already has (a saved game's NPC); else a new one
  session = params.get("session") ? await client.getSession(params.get("session")) : await client.createSession(asset);
  $("npc").textContent = (await client.getSession(session.id)).asset_name;
  show("idle");
  const said = [];
  for (const line of (params.get("say") ?? "").split("|").filter(Boolean)) said.push(await say(line));
  return { session: session.id, said, subtitle: $("subtitle").textContent };
})().catch((error) => ({ error: String(error) }));
