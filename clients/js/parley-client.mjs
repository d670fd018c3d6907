// A client for `parley serve` (API version 1): sessions, turns streamed as Server-Sent Events, tool
// calls answered while the turn runs, and typed errors. One ES module with no dependencies: it needs
// only fetch, ReadableStream and TextDecoder, so it runs on Node 18+ and in a browser alike.
// The protocol is described in docs/serving.md and GET /v1/openapi.json.

/**
 * @typedef {{severity: string, message: string, file?: string, node_id?: string, field?: string,
 *   line?: number, column?: number}} Problem
 * @typedef {{id: string, asset: string, asset_name: string, turns: number, busy: boolean,
 *   variables: Record<string, string|number|boolean>, backend: string}} Session
 * @typedef {{status: "ok", api: string, backend: string, sessions: number}} Health
 * @typedef {{path: string, name: string}} Asset
 * @typedef {{node: string, tool: string, arguments: Record<string, unknown>, call_id: string}} ToolRequest
 * @typedef {{policy: string, exit: string, node: string}} TurnGuard  the first policy a Guard node found
 *   broken in the turn, the exit it took ("policy:NAME") and the node; all "" when no guard fired
 * @typedef {{turn: number, turn_id: number, reply: string, path: string[],
 *   diagnostics: Record<string, unknown>|null, guard: TurnGuard, game_events: string[],
 *   tags: Record<string, string>}} TurnFinished
 *   game_events: the asset's marked game events the turn reached, by name, in order; tags: the reply's
 *   tags (a mood, a gesture), name -> value: the asset's reply_tags the turn's nodes wrote and the tag
 *   each Generate and Speak node with `tags` picked
 * @typedef {{kind: string, data: any, id?: string}} ParleyEvent  kind: turn_started, turn_queued,
 *   node_started, token, speak, tool_request, tool_call, summarized, warning, guarded, game_event,
 *   tag, node_finished, turn_finished, turn_failed (a kind this client does not know, from a newer server, is
 *   handed on as it came); id: the event's SSE id (RUN.N) when the server gave one
 * @typedef {{node: string, policy: string, exit: string, check: string, why: string,
 *   checked: "line"|"reply"}} Guarded  a guarded event's data: a Guard found `policy` broken (check:
 *   patterns, plugin:NAME or model; checked: the player's line, or a reply withdrawn before it was spoken)
 * @typedef {{node: string, text: string, reply: boolean, tags?: Record<string, string>}} Spoken  a speak
 *   event's data: a whole sentence, ready for text-to-speech; tags: the reply's tags as it is spoken
 *   (the node's own tag, picked before its first sentence, and earlier nodes' reply_tags; absent from an
 *   older server)
 * @typedef {{node: string, name: string, exit: string}} GameEvent  a game_event event's data: the turn
 *   reached a node or exit the asset marks as one the game acts on (exit "" when the mark is on the node)
 * @typedef {{turn_id: number, index: number, line: string, reply: string}} TurnLine
 * @typedef {{system_prompt?: string, temperature?: number, top_p?: number, max_tokens?: number,
 *   seed?: number}} NodeParams
 * @typedef {{
 *   instructions?: string,
 *   mockTools?: boolean,
 *   tools?: (request: ToolRequest) => string | Promise<string>,
 *   onEvent?: (event: ParleyEvent) => void,
 *   signal?: AbortSignal,
 *   cancelOnDisconnect?: boolean,
 * }} TurnOptions
 *   tools answers each tool_request (its result is POSTed while the stream goes on); without it the
 *   caller answers from onEvent with toolResult(). signal stops the turn (the client asks the server to
 *   cancel it). A stream that breaks mid-turn is resumed (see ResumeOptions); cancelOnDisconnect asks the
 *   server to cancel the turn when its connection drops instead, and the client does not resume.
 * @typedef {{tries?: number, delayMs?: number, idleMs?: number}} ResumeOptions
 *   tries: attempts to reach the resume route after a break (default 5), the first at once and then
 *   after delayMs, doubling (default 300: 0.3, 0.6, 1.2, 2.4 s, about 4.5 s in all); idleMs: a turn's
 *   stream silent this long counts as broken (default 45000; the server sends a keep-alive every 15 s).
 */

/**
 * turn_finished's data with guard, game_events and tags always there (a server from before they were sent
 * leaves them out). @param {any} data @returns {TurnFinished}
 */
function finishedTurn(data) {
  return { ...data, guard: { policy: "", exit: "", node: "", ...data?.guard }, game_events: data?.game_events ?? [],
    tags: data?.tags ?? {} };
}

/** Every failure the client reports: an error JSON answer, a failed turn, a lost connection. */
export class ParleyError extends Error {
  /**
   * @param {{code: string, message: string, status?: number, problems?: Problem[], node?: string,
   *   field?: string, model?: string, cause?: unknown}} details
   *   code: the server's error code (unknown_session, busy, ...) or a failed turn's (cancelled,
   *   tool_timeout, ...); the client's own: unavailable (no connection could be made: the server was
   *   never reached), server_gone (the server had been answering, went away, and reconnecting failed),
   *   turn_lost (a server answers, but none has the turn: unknown_run, or a balancer's 502/503/504),
   *   aborted, bad_answer, stream_ended (the stream broke and was not resumed: cancelOnDisconnect, or it
   *   broke before naming its run), tool_error, handler_error (onEvent threw).
   *   status: the HTTP status (200 for a turn that failed mid-stream, 0 when no answer came).
   *   model: for model_missing, the model name the server's models folder has no file for.
   *   line: for a turn that failed, the player's line handed back (to say again or put back in the
   *   input box); "" otherwise.
   */
  constructor({ code, message, status = 0, problems = [], node = "", field = "", model = "", line = "", cause }) {
    super(`${code}: ${message}`, cause === undefined ? undefined : { cause });
    this.name = "ParleyError";
    this.code = code;
    this.status = status;
    this.problems = problems;
    this.node = node;
    this.field = field;
    this.model = model;
    this.line = line;
  }
}

/**
 * Server-Sent Events parsed as they arrive: feed it text in chunks of any size (an event, a line or a
 * "\r\n" may be split between chunks); each complete event comes back from feed(). Comments (": ...",
 * the server's keep-alives) are dropped. Follows the WHATWG event-stream rules for event and data.
 */
export class EventStreamParser {
  constructor() {
    this.buffer = "";
    /** @type {string} */ this.kind = "";
    /** @type {string[]} */ this.data = [];
    /** @type {string} */ this.id = ""; // the last event id seen (it carries over, as the spec says)
  }

  /** @param {string} text @returns {ParleyEvent[]} */
  feed(text) {
    this.buffer += text;
    /** @type {ParleyEvent[]} */
    const events = [];
    let start = 0;
    for (;;) {
      const lf = this.buffer.indexOf("\n", start);
      const cr = this.buffer.indexOf("\r", start);
      let end = lf === -1 ? cr : cr === -1 ? lf : Math.min(lf, cr);
      if (end === -1) break;
      let next = end + 1;
      if (this.buffer[end] === "\r") {
        // a "\r" last in the buffer may be the first half of a "\r\n": wait for the next chunk
        if (end + 1 === this.buffer.length) break;
        if (this.buffer[end + 1] === "\n") next = end + 2;
      }
      const event = this.line(this.buffer.slice(start, end));
      if (event) events.push(event);
      start = next;
    }
    this.buffer = this.buffer.slice(start);
    return events;
  }

  /**
   * The stream ended: a last "\r" ends its line (which may complete an event); an event without its
   * blank line is dropped, as the spec says. @returns {ParleyEvent[]}
   */
  end() {
    const events = this.buffer.endsWith("\r") ? this.feed("\n") : [];
    this.buffer = "";
    this.kind = "";
    this.data = [];
    return events;
  }

  /** @param {string} line @returns {ParleyEvent|null} */
  line(line) {
    if (line === "") {
      if (this.data.length === 0) {
        this.kind = "";
        return null;
      }
      const raw = this.data.join("\n");
      const kind = this.kind || "message";
      this.kind = "";
      this.data = [];
      let data;
      const id = this.id;
      try {
        data = JSON.parse(raw);
      } catch (cause) {
        throw new ParleyError({ code: "bad_answer", message: `event ${kind}: its data is not JSON`, status: 200, cause });
      }
      return id ? { kind, data, id } : { kind, data };
    }
    if (line.startsWith(":")) return null;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this.kind = value;
    else if (field === "data") this.data.push(value);
    else if (field === "id" && !value.includes("\0")) this.id = value;
    return null; // retry means nothing here: the client resumes a turn's stream by its own rules
  }
}

/**
 * Reads an SSE response body to its end, handing each event to onEvent (awaited in order). With
 * idleMs, a body that sends nothing (not even a keep-alive) for that long fails as a network error.
 * @param {ReadableStream<Uint8Array>} body
 * @param {(event: ParleyEvent) => Promise<void>|void} onEvent
 * @param {number} [idleMs]
 */
async function readEvents(body, onEvent, idleMs = 0) {
  const reader = body.getReader();
  const decoder = new TextDecoder("utf-8");
  const parser = new EventStreamParser();
  /** @type {ReturnType<typeof setTimeout>|undefined} */
  let timer;
  const read = () => {
    if (!idleMs) return reader.read();
    const silent = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`the stream sent nothing for ${idleMs} ms`)), idleMs);
    });
    return Promise.race([reader.read(), silent]).finally(() => clearTimeout(timer));
  };
  try {
    for (;;) {
      const { value, done } = /** @type {ReadableStreamReadResult<Uint8Array>} */ (await read());
      if (done) break;
      for (const event of parser.feed(decoder.decode(value, { stream: true }))) await onEvent(event);
    }
    for (const event of [...parser.feed(decoder.decode()), ...parser.end()]) await onEvent(event);
  } catch (error) {
    // stop reading for good: the connection closes (the turn runs on unless it was asked with cancelOnDisconnect)
    await reader.cancel().catch(() => {});
    throw error;
  } finally {
    reader.releaseLock();
  }
}

/**
 * The caller's handler, whose error stops the stream as a ParleyError (handler_error).
 * @param {((event: ParleyEvent) => void)|undefined} onEvent @param {ParleyEvent} event
 */
function handOn(onEvent, event) {
  try {
    onEvent?.(event);
  } catch (cause) {
    const message = cause instanceof Error ? cause.message : String(cause);
    throw new ParleyError({ code: "handler_error", message: `onEvent threw on ${event.kind}: ${message}`, status: 200, cause });
  }
}

// Node's errors (undici's, and the socket's) that mean a connection had been made and then broke. Any
// other failure of a fetch is taken as no connection made: a browser's fetch never says which.
const BROKE_AFTER_CONNECTING = new Set(["ECONNRESET", "EPIPE", "ECONNABORTED", "UND_ERR_SOCKET", "UND_ERR_CLOSED",
  "UND_ERR_HEADERS_TIMEOUT", "UND_ERR_BODY_TIMEOUT"]);

/** Whether a failed fetch or read says a connection had been made and then broke. @param {unknown} cause */
function brokeAfterConnecting(cause) {
  for (let c = cause, depth = 0; c && depth < 8; depth += 1) {
    const code = /** @type {{code?: unknown}} */ (c).code;
    if (typeof code === "string" && BROKE_AFTER_CONNECTING.has(code)) return true;
    c = /** @type {{cause?: unknown}} */ (c).cause;
  }
  return false;
}

/**
 * The error an aborted or failed fetch or read becomes: unavailable when no connection was made (the
 * server was never reached), server_gone when one was made and broke before the answer was whole.
 * @param {unknown} cause @param {AbortSignal|undefined} signal @param {number} status
 */
function failure(cause, signal, status = 0) {
  if (cause instanceof ParleyError) return cause;
  if (signal?.aborted) return new ParleyError({ code: "aborted", message: "stopped by the caller's signal", status, cause });
  const message = cause instanceof Error ? cause.message : String(cause);
  const detail = brokeAfterConnecting(cause) ? ` (${/** @type {any} */ (cause).cause?.code ?? "reset"})` : "";
  if (detail) {
    return new ParleyError({ code: "server_gone", message: `the connection to the server broke: ${message}${detail}`, status, cause });
  }
  return new ParleyError({ code: "unavailable", message: `could not reach the server: ${message}`, status, cause });
}

/** The codes of a request that no server answered. @param {ParleyError} error */
function unanswered(error) {
  return error.code === "unavailable" || error.code === "server_gone";
}

/**
 * A turn whose stream broke and which a server answering says it does not have: turn_lost, the
 * player's line handed back.
 * @param {string} line @param {string} why @param {unknown} [cause]
 */
function lost(line, why, cause) {
  return new ParleyError({
    code: "turn_lost",
    message: `the server stopped before the turn finished (${why}); say the line again`,
    line,
    cause,
  });
}

/**
 * A turn whose server had been answering and then could not be reached again: server_gone, the
 * player's line handed back.
 * @param {string} line @param {string} why @param {unknown} [cause]
 */
function gone(line, why, cause) {
  return new ParleyError({
    code: "server_gone",
    message: `the server went away (${why}); say the line again when it is back`,
    line,
    cause,
  });
}

/**
 * Waits `ms`, or rejects as soon as `signal` aborts.
 * @param {number} ms @param {AbortSignal|undefined} signal @returns {Promise<void>}
 */
function pause(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", stop);
      resolve();
    }, ms);
    const stop = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", stop, { once: true });
  });
}

/** @param {Response} response @returns {Promise<ParleyError>} */
async function errorFrom(response) {
  const text = await response.text().catch(() => "");
  let body = null;
  try {
    body = JSON.parse(text);
  } catch {
    // not the server's error JSON (a proxy's page): say what came
  }
  const error = body && typeof body === "object" ? body.error : null;
  if (error && typeof error.code === "string") {
    return new ParleyError({
      code: error.code,
      message: String(error.message ?? ""),
      status: response.status,
      problems: Array.isArray(error.problems) ? error.problems : [],
    });
  }
  return new ParleyError({
    code: "bad_answer",
    message: `HTTP ${response.status} without an error JSON: ${text.slice(0, 200)}`,
    status: response.status,
  });
}

/** A client of one `parley serve` server. Every method rejects with a ParleyError. */
export class ParleyClient {
  /**
   * @param {string} baseUrl the server's address, e.g. "http://127.0.0.1:8765" (what it prints)
   * @param {{token?: string, fetch?: typeof fetch, resume?: ResumeOptions}} [options] token: sent as
   *   "Authorization: Bearer"; resume: how a turn whose stream broke is resumed
   */
  constructor(baseUrl, { token, fetch: fetchImpl, resume = {} } = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.token = token;
    this.fetch = fetchImpl ?? globalThis.fetch.bind(globalThis);
    /** @type {ResumeOptions} */
    this.resumeOptions = resume;
  }

  /** @param {string} id */
  static path(id) {
    return `/v1/sessions/${encodeURIComponent(id)}`;
  }

  /**
   * One request; its answer when it succeeds (an error JSON answer rejects).
   * @param {string} method @param {string} path @param {unknown} [body]
   * @param {{signal?: AbortSignal, accept?: string, headers?: Record<string, string>}} [options]
   * @returns {Promise<Response>}
   */
  async request(method, path, body, { signal, accept = "application/json", headers: extra = {} } = {}) {
    /** @type {Record<string, string>} */
    const headers = { ...extra, accept };
    if (this.token) headers.authorization = `Bearer ${this.token}`;
    if (body !== undefined) headers["content-type"] = "application/json";
    let response;
    try {
      response = await this.fetch(this.baseUrl + path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal,
      });
    } catch (cause) {
      throw failure(cause, signal);
    }
    if (!response.ok) throw await errorFrom(response);
    return response;
  }

  /**
   * @param {string} method @param {string} path @param {unknown} [body]
   * @returns {Promise<any>} the answer's JSON (null for 204)
   */
  async json(method, path, body) {
    const response = await this.request(method, path, body);
    if (response.status === 204) return null;
    const text = await response.text();
    try {
      return JSON.parse(text);
    } catch (cause) {
      throw new ParleyError({ code: "bad_answer", message: `${method} ${path}: the answer is not JSON`, status: response.status, cause });
    }
  }

  /** @returns {Promise<Health>} */
  health() {
    return this.json("GET", "/v1/health");
  }

  /**
   * Stops the server (for a game that cannot send its child SIGTERM): its turns are cancelled, their
   * sessions kept as before them, and it exits within the seconds it answers. Needs the server's
   * token; a server started without one refuses it (forbidden).
   * @returns {Promise<number>}
   */
  async shutdown() {
    return (await this.json("POST", "/v1/shutdown")).seconds;
  }

  /** @returns {Promise<Asset[]>} the assets the server may load */
  async assets() {
    return (await this.json("GET", "/v1/assets")).assets;
  }

  /**
   * @param {string} asset a path relative to one of the server's --assets folders
   * @param {{variables?: Record<string, string|number|boolean>, id?: string}} [options]
   * @returns {Promise<Session>}
   */
  createSession(asset, { variables = {}, id } = {}) {
    return this.json("POST", "/v1/sessions", id === undefined ? { asset, variables } : { asset, variables, id });
  }

  /** @returns {Promise<Session[]>} */
  async listSessions() {
    return (await this.json("GET", "/v1/sessions")).sessions;
  }

  /** @param {string} id @returns {Promise<Session>} */
  getSession(id) {
    return this.json("GET", ParleyClient.path(id));
  }

  /** Deletes a session (a running turn is cancelled first). @param {string} id @returns {Promise<void>} */
  async deleteSession(id) {
    await this.json("DELETE", ParleyClient.path(id));
  }

  /** @param {string} id @returns {Promise<Record<string, unknown>>} the dialog history file's JSON */
  exportHistory(id) {
    return this.json("GET", `${ParleyClient.path(id)}/history`);
  }

  /** @param {string} id @param {Record<string, unknown>} history @returns {Promise<Session>} */
  importHistory(id, history) {
    return this.json("PUT", `${ParleyClient.path(id)}/history`, history);
  }

  /** @param {string} id @param {Record<string, string|number|boolean>} variables @returns {Promise<Session>} */
  setVariables(id, variables) {
    return this.json("PATCH", `${ParleyClient.path(id)}/variables`, { variables });
  }

  /**
   * Prompts and sampling only; a structural field is refused (structural_change).
   * @param {string} id @param {Record<string, NodeParams>} nodes node id -> what to change
   * @returns {Promise<Session>}
   */
  changeParams(id, nodes) {
    return this.json("PATCH", `${ParleyClient.path(id)}/params`, { nodes });
  }

  /** Keeps the first `turns` turns. @param {string} id @param {number} turns @returns {Promise<Session>} */
  rewind(id, turns) {
    return this.json("POST", `${ParleyClient.path(id)}/rewind`, { turns });
  }

  /** @param {string} id @returns {Promise<boolean>} false: no turn was running */
  async cancel(id) {
    return (await this.json("POST", `${ParleyClient.path(id)}/cancel`)).cancelled;
  }

  /** Answers a tool_request. @param {string} id @param {string} callId @param {string} result @returns {Promise<void>} */
  async toolResult(id, callId, result) {
    await this.json("POST", `${ParleyClient.path(id)}/tool_results`, { call_id: callId, result });
  }

  /** @param {string} id @returns {Promise<TurnLine[]>} the current branch's turns */
  async listTurns(id) {
    return (await this.json("GET", `${ParleyClient.path(id)}/turns`)).turns;
  }

  /**
   * A turn's record; its diagnostics, prompts, guard and game_events only for turns this server ran and still keeps.
   * @param {string} id @param {number} turnId
   * @returns {Promise<TurnLine & {path: string[], diagnostics: any, prompts: any, guard: TurnGuard, game_events: string[]}>}
   */
  async getTurn(id, turnId) {
    return finishedTurn(await this.json("GET", `${ParleyClient.path(id)}/turns/${turnId}`));
  }

  /**
   * Runs a turn: resolves with turn_finished's data, rejects with a ParleyError (a failed turn's code,
   * e.g. cancelled; busy before the stream starts; tool_error when `tools` threw).
   * @param {string} id @param {string} line what the player said @param {TurnOptions} [options]
   * @returns {Promise<TurnFinished>}
   */
  turn(id, line, { instructions = "", mockTools = false, ...options } = {}) {
    return this.stream(`${ParleyClient.path(id)}/turns`, { line, instructions, mock_tools: mockTools }, id, line, options);
  }

  /**
   * Runs turn `turn` (counted from 0) again; later turns stay on the old branch. Like turn().
   * @param {string} id @param {number} turn @param {TurnOptions} [options] @returns {Promise<TurnFinished>}
   */
  regenerate(id, turn, { instructions = "", mockTools = false, ...options } = {}) {
    return this.stream(`${ParleyClient.path(id)}/regenerate`, { turn, instructions, mock_tools: mockTools }, id, "", options);
  }

  /**
   * @param {string} path @param {Record<string, unknown>} body @param {string} id
   * @param {string} line the player's line, handed back when the turn fails ("" for regenerate: then
   *   turn_started's line)
   * @param {TurnOptions} options
   * @returns {Promise<TurnFinished>}
   */
  async stream(path, body, id, line, { tools, onEvent, signal, cancelOnDisconnect = false }) {
    if (cancelOnDisconnect) body = { ...body, cancel_on_disconnect: true };
    let response;
    try {
      response = await this.request("POST", path, body, { signal, accept: "text/event-stream" });
    } catch (error) {
      // unavailable (never reached: the turn never began) goes out as it is; a connection that was made
      // and broke before the answer is a stream that broke before naming its run
      if (!(error instanceof ParleyError) || error.code !== "server_gone") throw error;
      throw await this.unresumed(id, line, cancelOnDisconnect, error);
    }
    /** @type {ParleyError|null} */
    let toolError = null; // the caller's tools threw: that, not the cancel it causes, is the turn's error
    /** @type {ParleyError|null} */
    let postError = null; // posting a result failed (e.g. the turn was cancelled meanwhile): matters only if the stream says nothing
    /** @type {ParleyEvent|null} */
    let last = null;
    let ended = false; // once the stream has ended, a tool that throws must not cancel the session's next turn
    /** @type {string|null} */
    // the turn's run, from the answer's Parley-Run header (or turn_started or turn_queued, from an older
    // server): what a broken stream resumes, even one that broke before its first event arrived
    let run = response.headers?.get("parley-run") || null;
    let seen = 0; // the number N of the last event delivered (its id is RUN.N)
    let fresh = false; // an event arrived since the last break: the resume tries start again

    // Answers run beside the stream and never reject. The turn does not wait for one still running
    // when the stream ends: the stream's last event has settled the turn by then.
    /** @param {ToolRequest} request */
    const answer = async (request) => {
      let result;
      try {
        result = await tools?.(request);
        if (typeof result !== "string") throw new TypeError(`tools gave ${typeof result}, not a string`);
      } catch (cause) {
        toolError ??= new ParleyError({
          code: "tool_error",
          message: `tool ${request.tool} failed: ${cause instanceof Error ? cause.message : String(cause)}`,
          node: request.node,
          line,
          cause,
        });
        if (!ended) await this.cancel(id).catch(() => {});
        return;
      }
      try {
        await this.toolResult(id, request.call_id, result);
      } catch (error) {
        postError ??= failure(error, signal);
      }
    };

    /** @param {ParleyEvent} event */
    const deliver = (event) => {
      const dot = event.id?.lastIndexOf(".") ?? -1;
      if (dot > 0) {
        const number = Number(event.id?.slice(dot + 1));
        if (run === null) run = event.id?.slice(0, dot) ?? null;
        if (event.id?.slice(0, dot) === run && Number.isInteger(number)) {
          if (number <= seen) return; // had it before the break: never delivered twice
          seen = number;
        }
      }
      if ((event.kind === "turn_started" || event.kind === "turn_queued") && typeof event.data?.run === "string") {
        run ??= event.data.run;
        if (typeof event.data.line === "string" && event.data.line) line ||= event.data.line;
      }
      fresh = true;
      last = event;
      handOn(onEvent, event);
      if (event.kind === "tool_request" && tools) void answer(event.data);
    };

    const tries = Math.max(1, this.resumeOptions.tries ?? 5);
    let attempt = 0; // resume attempts since an event last arrived
    try {
      for (;;) {
        if (!response.body) throw new ParleyError({ code: "bad_answer", message: "the turn's answer has no body", status: response.status, line });
        /** @type {unknown} */
        let broke = null;
        try {
          await readEvents(response.body, deliver, this.resumeOptions.idleMs ?? 45000);
        } catch (cause) {
          broke = cause;
        }
        const end = /** @type {ParleyEvent|null} */ (last); // set in the callback, which the checker cannot see
        if (end?.kind === "turn_finished" || end?.kind === "turn_failed") break;
        if (toolError) throw toolError;
        if (signal?.aborted) throw await this.stopped(id, cancelOnDisconnect, signal, line, broke);
        if (broke instanceof ParleyError) {
          // handler_error or bad_answer: nothing to resume, and the turn runs on at the server unless
          // it is told to stop
          if (!cancelOnDisconnect) await this.cancel(id).catch(() => {});
          broke.line ||= line;
          throw broke;
        }
        if (cancelOnDisconnect || run === null) {
          // asked not to resume (the server cancels the turn), or no event came to say which run it is
          throw await this.unresumed(id, line, cancelOnDisconnect, broke ?? postError);
        }
        if (fresh) attempt = 0;
        fresh = false;
        response = await this.resume(id, run, seen, line, signal, cancelOnDisconnect, tries, () => attempt++);
      }
    } finally {
      ended = true;
    }
    if (toolError) throw toolError;
    const end = /** @type {ParleyEvent} */ (/** @type {unknown} */ (last));
    if (end.kind === "turn_finished") return finishedTurn(end.data);
    const error = end.data?.error ?? {};
    throw new ParleyError({
      code: String(error.code ?? "turn_error"),
      message: String(error.message ?? ""),
      status: response.status,
      node: error.node ?? "",
      field: error.field ?? "",
      model: error.model ?? "",
      line: typeof end.data?.line === "string" ? end.data.line : line,
    });
  }

  /**
   * The error of a turn whose stream broke and cannot be resumed: asked with cancelOnDisconnect (the
   * server cancels the turn), or broken before any event named its run. Then the turn may run on
   * unseen: the client asks the server to cancel it, and that request is the reconnect that tells a
   * server gone (server_gone) from a connection that broke (stream_ended). The line is handed back.
   * @param {string} id @param {string} line @param {boolean} cancelOnDisconnect @param {unknown} broke
   * @returns {Promise<ParleyError>}
   */
  async unresumed(id, line, cancelOnDisconnect, broke) {
    const why = broke instanceof Error ? broke.message : "the stream ended before the turn did";
    if (!cancelOnDisconnect) {
      const cancelled = await this.cancel(id).then(() => null, (error) => failure(error, undefined));
      if (cancelled && unanswered(cancelled)) {
        return gone(line, `the turn's stream broke (${why}), and reconnecting failed: ${cancelled.message}`, broke);
      }
    }
    return new ParleyError({
      code: "stream_ended",
      message: `the turn's stream broke (${why}) and was not resumed, so the turn was cancelled; say the line again`,
      line,
      cause: broke,
    });
  }

  /**
   * The rest of run `run` after its event `seen`, from the resume route: tried again after a short,
   * doubling delay while no server answers (or one answers 5xx), up to `tries` attempts since the
   * last event arrived (`next` counts them). turn_lost when a server answers that it does not know the
   * run (or the last try was answered 5xx: a balancer with no server for it); server_gone when the last
   * try reached no server at all.
   * @param {string} id @param {string} run @param {number} seen @param {string} line
   * @param {AbortSignal|undefined} signal @param {boolean} cancelOnDisconnect @param {number} tries
   * @param {() => number} next @returns {Promise<Response>}
   */
  async resume(id, run, seen, line, signal, cancelOnDisconnect, tries, next) {
    const delayMs = this.resumeOptions.delayMs ?? 300;
    /** @type {ParleyError|null} */
    let last = null; // the last try's failure
    for (;;) {
      const attempt = next();
      if (attempt >= tries) {
        if (last && !unanswered(last)) throw lost(line, `${tries} tries to resume it were answered ${last.status || last.code}`, last);
        throw gone(line, `no try of ${tries} to resume the turn reached it${last ? `: ${last.message}` : ""}`, last ?? undefined);
      }
      try {
        if (attempt > 0) await pause(delayMs * 2 ** (attempt - 1), signal);
        return await this.request("GET", `${ParleyClient.path(id)}/runs/${encodeURIComponent(run)}/events`, undefined, {
          signal,
          accept: "text/event-stream",
          headers: { "last-event-id": `${run}.${seen}` },
        });
      } catch (error) {
        if (signal?.aborted) throw await this.stopped(id, cancelOnDisconnect, signal, line, error);
        const parley = failure(error, signal);
        if (parley.code === "unknown_run") throw lost(line, "the server does not know it any more", parley);
        last = parley;
        const again = unanswered(parley) || parley.status >= 500 || parley.status === 429 || parley.code === "bad_answer";
        if (!again) {
          parley.line = line;
          throw parley;
        }
      }
    }
  }

  /**
   * The caller's signal stopped a turn: asks the server to cancel it (a dropped connection no longer
   * does, unless the turn was asked with cancelOnDisconnect) and gives the `aborted` error.
   * @param {string} id @param {boolean} cancelOnDisconnect @param {AbortSignal} signal @param {string} line
   * @param {unknown} cause @returns {Promise<ParleyError>}
   */
  async stopped(id, cancelOnDisconnect, signal, line, cause) {
    if (!cancelOnDisconnect) await this.cancel(id).catch(() => {});
    const error = failure(cause ?? signal.reason, signal);
    error.line = line;
    return error;
  }

  /**
   * Observes a session: every event of every turn it runs from now on (by any client), each turn
   * opened by turn_started. Resolves once the server says the observer is subscribed (its watching
   * event, which onEvent also gets), so a turn started after that is seen whole. The returned `done`
   * settles when the stream ends: it resolves when the session is deleted or the watch is closed
   * (close() or the signal) and rejects with a ParleyError when the connection is lost.
   * @param {string} id
   * @param {{onEvent?: (event: ParleyEvent) => void, signal?: AbortSignal}} [options]
   * @returns {Promise<{done: Promise<void>, close: () => void}>}
   */
  async watch(id, { onEvent, signal } = {}) {
    const controller = new AbortController();
    const stop = () => controller.abort(signal?.reason);
    if (signal?.aborted) stop();
    signal?.addEventListener("abort", stop, { once: true });
    const close = () => controller.abort();
    /** @type {() => void} */
    let subscribed = () => {};
    const opened = new Promise((resolve) => (subscribed = () => resolve(undefined)));
    const done = (async () => {
      try {
        const response = await this.request("GET", `${ParleyClient.path(id)}/events`, undefined, {
          signal: controller.signal,
          accept: "text/event-stream",
        });
        if (!response.body) throw new ParleyError({ code: "bad_answer", message: "the watch stream has no body", status: response.status });
        try {
          await readEvents(response.body, (event) => {
            handOn(onEvent, event);
            if (event.kind === "watching") subscribed();
          });
        } catch (cause) {
          if (!controller.signal.aborted) throw failure(cause, undefined, response.status);
        }
      } catch (error) {
        if (!(error instanceof ParleyError && error.code === "aborted")) throw error;
      } finally {
        signal?.removeEventListener("abort", stop);
      }
    })();
    // the stream may end, or fail, before it says it is subscribed: then watch() settles with it
    await Promise.race([opened, done]);
    return { done, close };
  }
}
