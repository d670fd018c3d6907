// Runs the protocol test set in Node: PARLEY_URL, PARLEY_TOKEN, PARLEY_PROTOCOL, PARLEY_CLIENT
// (clients/protocol/README.md).

import { readFile } from "node:fs/promises";

import { ParleyClient } from "../parley-client.mjs";
import { runProtocol } from "./driver.mjs";

const { PARLEY_URL, PARLEY_TOKEN, PARLEY_PROTOCOL, PARLEY_CLIENT } = process.env;
const script = JSON.parse(await readFile(PARLEY_PROTOCOL, "utf-8"));
const client = new ParleyClient(PARLEY_URL, { token: PARLEY_TOKEN });
await runProtocol(client, script, PARLEY_CLIENT, (line) => console.log(line));
