# A client of `parley serve` (API version 1) for Godot 3.2+: the twin of ../../../addons/parley/parley.gd
# (Godot 4), with the same structure and names so the two can be diffed. Added as the autoload "Parley"
# by the plugin. A turn's Server-Sent Events are read from a polled HTTPClient as they come; a tool
# call is answered on a second connection while the stream stays open; a stream that breaks is resumed
# with Last-Event-ID. Every request is a coroutine: `var answer = yield(Parley.health(), "completed")`.
# The protocol: docs/serving.md. How to use it: clients/godot/README.md.
extends Node

# Every signal names the session (the NPC) first: one autoload serves every NPC. is_reply is the
# event's "reply" flag: show only reply text (an inner node's text, such as a Tool Call's JSON, is not).
signal token(session, text, node, is_reply)
signal speak(session, text, node, is_reply)
signal tool_request(session, call_id, tool_name, arguments, node)
signal tag(session, name, value)
signal turn_finished(session, result)
signal turn_failed(session, result)
# state: sending, queued, running, waiting_tool, resuming, idle (emitted only when it changes)
signal state_changed(session, state)
signal event(session, kind, data)  # every event of every turn, kinds this client does not know too

var base_url := "http://127.0.0.1:8765"
var bearer_token := ""  # sent as "Authorization: Bearer ..." when set
var connect_seconds := 5.0  # connecting longer than this is `unavailable`
var answer_seconds := 30.0  # a plain request's whole answer
var idle_seconds := 45.0  # a turn's stream silent this long is broken (the server's keep-alive: every 15 s)
# A broken stream is resumed as the JS client does: up to 5 tries since the last event came, the
# first at once, then after 0.3 s, doubling (0.3, 0.6, 1.2, 2.4: about 4.5 s in all).
var resume_tries := 5
var resume_delay := 0.3

var _states := {}


class Turn extends Reference:
	# One turn of one session: its own signals (the autoload's, without the session), and wait().
	signal token(text, node, is_reply)
	signal speak(text, node, is_reply)
	signal tool_request(call_id, tool_name, arguments, node)
	signal tag(name, value)
	signal event(kind, data)
	signal finished(result)

	var session := ""
	var line := ""  # the player's line, handed back when the turn fails
	var tools := {}  # tool name -> its answer: a String, or a FuncRef called with the arguments
	var run := ""  # the run, from the first event's id RUN.N: what a broken stream resumes
	var seen := 0  # N of the last event delivered
	var tags := {}
	var done := false
	var result := {}
	var _fresh := false  # an event came since the last break: the resume tries start again
	var _attempt := 0

	# The turn's result, once it ends: yield(turn.wait(), "completed").
	func wait():
		if done:
			yield(Engine.get_main_loop(), "idle_frame")
		else:
			yield(self, "finished")
		return result


class EventStream extends Reference:
	# Server-Sent Events from bytes in chunks of any size. Lines are decoded only once whole, so a
	# UTF-8 character split between chunks is never broken; "\r\n", "\n" and "\r" end a line;
	# comments (": keep-alive") are dropped. feed() gives the events completed:
	# {"kind", "data" (parsed JSON), "id" (the last id seen, RUN.N), "bad" (data is not JSON)}.
	var last_id := ""
	var _bytes := PoolByteArray()
	var _scanned := 0  # bytes at the start of _bytes known to hold no line end
	var _kind := ""
	var _data := []

	func feed(chunk: PoolByteArray) -> Array:
		_bytes.append_array(chunk)
		var events := []
		var start := 0
		var i := _scanned
		var n := _bytes.size()
		while i < n:
			var b: int = _bytes[i]
			if b == 10 or b == 13:
				if b == 13 and i + 1 == n:
					break  # perhaps the first half of "\r\n": wait for the next chunk
				var text := "" if i == start else _bytes.subarray(start, i - 1).get_string_from_utf8()
				var found = _line(text)
				if found != null:
					events.append(found)
				if b == 13 and _bytes[i + 1] == 10:
					i += 1
				start = i + 1
			i += 1
		_bytes = _bytes.subarray(start, n - 1) if start < n else PoolByteArray()
		_scanned = i - start
		return events

	# The stream ended: a last "\r" ends its line; an event without its blank line is dropped.
	func end() -> Array:
		var events := []
		if _bytes.size() > 0 and _bytes[_bytes.size() - 1] == 13:
			events = feed(PoolByteArray([10]))
		_bytes = PoolByteArray()
		_scanned = 0
		_kind = ""
		_data = []
		return events

	func _line(text: String):
		if text == "":
			if _data.empty():
				_kind = ""
				return null
			var raw := PoolStringArray(_data).join("\n")
			var kind := _kind if _kind != "" else "message"
			_kind = ""
			_data = []
			var parsed := JSON.parse(raw)
			return {"kind": kind, "data": parsed.result if parsed.error == OK else null, "id": last_id,
					"bad": parsed.error != OK}
		if text.begins_with(":"):
			return null
		var colon := text.find(":")
		var field := text if colon < 0 else text.substr(0, colon)
		var value := "" if colon < 0 else text.substr(colon + 1, text.length())
		if value.begins_with(" "):
			value = value.substr(1, value.length())
		if field == "event":
			_kind = value
		elif field == "data":
			_data.append(value)
		elif field == "id" and value.find(char(0)) < 0:
			last_id = value
		return null


# --- plain requests: each answers {"ok", "status", "data", "error" (a code or ""), "message"} ---

func health():
	return yield(_request(HTTPClient.METHOD_GET, "/v1/health"), "completed")


func assets():
	return yield(_request(HTTPClient.METHOD_GET, "/v1/assets"), "completed")


# asset: a path inside one of the server's --assets folders; id: your NPC's own id ("": one is made).
func create_session(asset: String, id := "", variables := {}):
	var body := {"asset": asset, "variables": variables}
	if id != "":
		body["id"] = id
	return yield(_request(HTTPClient.METHOD_POST, "/v1/sessions", body), "completed")


func get_session(session: String):
	return yield(_request(HTTPClient.METHOD_GET, _path(session)), "completed")


func delete_session(session: String):
	return yield(_request(HTTPClient.METHOD_DELETE, _path(session)), "completed")


# The current branch's turns: data.turns is [{"turn_id", "index", "line", "reply"}].
func turns(session: String):
	return yield(_request(HTTPClient.METHOD_GET, _path(session) + "/turns"), "completed")


# The dialog history file (to save a game); import_history() loads it into a session of the same asset.
func history(session: String):
	return yield(_request(HTTPClient.METHOD_GET, _path(session) + "/history"), "completed")


func import_history(session: String, saved: Dictionary):
	return yield(_request(HTTPClient.METHOD_PUT, _path(session) + "/history", saved), "completed")


func set_variables(session: String, variables: Dictionary):
	var body := {"variables": variables}
	return yield(_request(HTTPClient.METHOD_PATCH, _path(session) + "/variables", body), "completed")


# Stops the session's running turn (and the lines waiting behind it): that turn ends `cancelled`.
func cancel(session: String):
	return yield(_request(HTTPClient.METHOD_POST, _path(session) + "/cancel"), "completed")


# Answers a tool_request, on a connection of its own while the turn's stream stays open.
func answer_tool(session: String, call_id: String, result: String):
	var body := {"call_id": call_id, "result": result}
	return yield(_request(HTTPClient.METHOD_POST, _path(session) + "/tool_results", body), "completed")


# --- turns: each result is {"ok", "reply", "tags", "record" (turn_finished's data), "error" (a failed
# turn's code or ""), "message", "line" (the player's line, handed back when it failed), "status"} ---

# One turn, to its end: var result = yield(Parley.say("mira", "hello"), "completed").
# tools: tool name -> its answer (a String, or a FuncRef called with the arguments); a tool not in it
# is left to a tool_request handler, which calls answer_tool().
func say(session: String, line: String, tools := {}, options := {}):
	var turn = start(session, line, tools, options)
	var result = yield(turn.wait(), "completed")
	return result


# Starts a turn and hands it back at once, to connect to its signals; options: instructions, mock_tools.
func start(session: String, line: String, tools := {}, options := {}) -> Turn:
	var turn := Turn.new()
	turn.session = session
	turn.line = line
	turn.tools = tools
	var body := {"line": line, "instructions": options.get("instructions", ""),
			"mock_tools": options.get("mock_tools", false)}
	_run(turn, _path(session) + "/turns", body)
	return turn


# Picks up run `run` after its event `after` (its id RUN.N): what start() does by itself when a
# stream breaks, for a game that lost the turn's stream some other way (a scene reloaded).
func resume(session: String, run: String, after: int, line := "", tools := {}) -> Turn:
	var turn := Turn.new()
	turn.session = session
	turn.line = line
	turn.tools = tools
	turn.run = run
	turn.seen = after
	_run(turn, "", {})
	return turn


func _run(turn: Turn, path: String, body: Dictionary):
	_set_state(turn.session, "sending")
	var opened: Dictionary
	if path == "":
		opened = yield(_resume(turn), "completed")
	else:
		opened = yield(_open(HTTPClient.METHOD_POST, path, body, "text/event-stream"), "completed")
		if not opened.ok and opened.error == "server_gone":
			# connected, then broken before any answer: the turn may run on unseen
			opened = yield(_unresumed(turn, opened.message), "completed")
	while opened.ok:
		if opened.status != 200:
			opened = yield(_answer(opened), "completed")
			opened.line = turn.line
			break
		if turn.run == "":  # named in the answer's head: a stream broken before its first event still resumes
			turn.run = _header(opened.http, "parley-run")
		var why = yield(_read_events(turn, opened.http), "completed")
		if turn.done:
			return
		if turn.run == "":
			opened = yield(_unresumed(turn, why), "completed")
			break
		if turn._fresh:
			turn._attempt = 0
		turn._fresh = false
		opened = yield(_resume(turn), "completed")
	_finish(turn, _failed(opened.error, opened.message, opened.get("line", ""), opened.status))


# Reads events until the turn ends or the stream does; why it stopped ("" when the turn ended).
func _read_events(turn: Turn, http: HTTPClient):
	var parser := EventStream.new()
	var heard := OS.get_ticks_msec()
	var why := ""
	yield(get_tree(), "idle_frame")
	while not turn.done:
		http.poll()
		var status := http.get_status()
		var chunk := http.read_response_body_chunk() if status == HTTPClient.STATUS_BODY else PoolByteArray()
		var events := parser.feed(chunk) if chunk.size() > 0 else []
		if status != HTTPClient.STATUS_BODY:
			events = parser.end()
			why = "the stream ended before the turn did"
		for found in events:
			if not turn.done:
				_deliver(turn, found)
		if why != "" or turn.done:
			break
		if chunk.size() > 0:
			heard = OS.get_ticks_msec()
		elif OS.get_ticks_msec() - heard > idle_seconds * 1000:
			why = "the stream sent nothing for %d s" % idle_seconds
			break
		else:
			yield(get_tree(), "idle_frame")
	http.close()
	return why


func _deliver(turn: Turn, found: Dictionary) -> void:
	var kind: String = found.kind
	var data = found.data
	var dot: int = found.id.find_last(".")
	if dot > 0:
		var run: String = found.id.substr(0, dot)
		var number := int(found.id.substr(dot + 1, found.id.length()))
		if turn.run == "":
			turn.run = run
		if run == turn.run:
			if number <= turn.seen:
				return  # had it before the break: never delivered twice
			turn.seen = number
	turn._fresh = true
	if found.bad or not (data is Dictionary):
		cancel(turn.session)
		_finish(turn, _failed("bad_answer", "event %s: its data is not a JSON object" % kind, turn.line, 200))
		return
	if kind in ["turn_started", "turn_queued"] and turn.run == "":
		turn.run = str(data.get("run", ""))
	var session := turn.session
	emit_signal("event", session, kind, data)
	turn.emit_signal("event", kind, data)
	if kind == "turn_queued":
		_set_state(session, "queued")
	elif kind in ["turn_started", "tool_call"]:
		_set_state(session, "running")
	elif kind == "token" or kind == "speak":
		var text := str(data.get("text", ""))
		var node := str(data.get("node", ""))
		var is_reply: bool = data.get("reply", false) == true
		emit_signal(kind, session, text, node, is_reply)
		turn.emit_signal(kind, text, node, is_reply)
	elif kind == "tag":
		var name := str(data.get("name", ""))
		var value := str(data.get("value", ""))
		turn.tags[name] = value
		emit_signal("tag", session, name, value)
		turn.emit_signal("tag", name, value)
	elif kind == "tool_request":
		_set_state(session, "waiting_tool")
		var call_id := str(data.get("call_id", ""))
		var tool_name := str(data.get("tool", ""))
		var arguments = data.get("arguments", {})
		var node := str(data.get("node", ""))
		emit_signal("tool_request", session, call_id, tool_name, arguments, node)
		turn.emit_signal("tool_request", call_id, tool_name, arguments, node)
		if turn.tools.has(tool_name):
			_answer_with(turn, call_id, tool_name, arguments)
	elif kind == "turn_finished":
		var tags = data.get("tags", turn.tags)
		_finish(turn, {"ok": true, "reply": str(data.get("reply", "")), "tags": tags, "record": data,
				"error": "", "message": "", "line": "", "status": 200})
	elif kind == "turn_failed":
		var error = data.get("error", {})
		error = error if error is Dictionary else {}
		var line = data.get("line", turn.line)
		_finish(turn, _failed(str(error.get("code", "turn_error")), str(error.get("message", "")),
				line if line is String else turn.line, 200))


func _answer_with(turn: Turn, call_id: String, tool_name: String, arguments):
	var answer = turn.tools[tool_name]
	if answer is FuncRef:
		answer = answer.call_func(arguments)
		if answer is GDScriptFunctionState:
			answer = yield(answer, "completed")
	yield(answer_tool(turn.session, call_id, str(answer)), "completed")


func _finish(turn: Turn, result: Dictionary) -> void:
	if turn.done:
		return
	turn.done = true
	turn.result = result
	_set_state(turn.session, "idle")
	emit_signal("turn_finished" if result.ok else "turn_failed", turn.session, result)
	turn.emit_signal("finished", result)


func _failed(code: String, message: String, line: String, status: int) -> Dictionary:
	return {"ok": false, "reply": "", "tags": {}, "record": {}, "error": code, "message": message,
			"line": line, "status": status}


# The stream broke before any event named its run: the turn may run on unseen, so it is cancelled,
# and that request tells a server gone (server_gone) from a connection that broke (stream_ended).
func _unresumed(turn: Turn, why: String):
	var cancelled = yield(cancel(turn.session), "completed")
	if not cancelled.ok and _unanswered(cancelled):
		return _answered_not("server_gone", "the turn's stream broke (%s), and reconnecting failed: %s"
				% [why, cancelled.message], turn.line)
	return _answered_not("stream_ended", "the turn's stream broke (%s) and was not resumed, so the turn was cancelled; say the line again" % why, turn.line)


# The rest of the turn's run from the resume route, tried again while no server answers (or one
# answers 5xx). turn_lost when a server answers that it does not know the run; server_gone when no try
# reached one.
func _resume(turn: Turn):
	var path := "%s/runs/%s/events" % [_path(turn.session), turn.run.percent_encode()]
	var header := "Last-Event-ID: %s.%d" % [turn.run, turn.seen]
	var last := {}
	while true:
		var attempt := turn._attempt
		turn._attempt += 1
		if attempt >= resume_tries:
			if not last.empty() and not _unanswered(last):
				return _answered_not("turn_lost", "the server stopped before the turn finished (%d tries to resume it were answered %s); say the line again" % [resume_tries, last.error], turn.line)
			return _answered_not("server_gone", "no try of %d to resume the turn reached it; say the line again when it is back" % resume_tries, turn.line)
		if attempt > 0:
			yield(get_tree().create_timer(resume_delay * pow(2, attempt - 1)), "timeout")
		_set_state(turn.session, "resuming")
		var opened = yield(_open(HTTPClient.METHOD_GET, path, null, "text/event-stream", [header]), "completed")
		if opened.ok and opened.status == 200:
			return opened
		if opened.ok:
			opened = yield(_answer(opened), "completed")
		if opened.error == "unknown_run":
			return _answered_not("turn_lost", "the server stopped before the turn finished (it does not know the run any more); say the line again", turn.line)
		last = opened
		if not (_unanswered(opened) or opened.status >= 500 or opened.status == 429 or opened.error == "bad_answer"):
			opened.line = turn.line
			return opened
	return last


func _unanswered(answer: Dictionary) -> bool:
	return answer.error == "unavailable" or answer.error == "server_gone"


func _answered_not(code: String, message: String, line := "", status := 0) -> Dictionary:
	return {"ok": false, "status": status, "data": null, "error": code, "message": message, "line": line}


# --- HTTP: one HTTPClient (one connection) per request, polled once a frame ---

func _request(method: int, path: String, body = null):
	var opened = yield(_open(method, path, body, "application/json"), "completed")
	if not opened.ok:
		return opened
	return yield(_answer(opened), "completed")


# Connects and sends; {"ok", "http", "status"} once the answer's head has come, else unavailable (no
# connection could be made) or server_gone (one was made and broke before the answer).
func _open(method: int, path: String, body, accept: String, extra := []):
	var address := _address()
	var http := HTTPClient.new()
	http.read_chunk_size = 65536
	var err := http.connect_to_host(address.host, address.port, address.tls)
	yield(get_tree(), "idle_frame")
	if err != OK:
		return _answered_not("unavailable", "could not connect to %s (error %d)" % [base_url, err])
	var deadline := OS.get_ticks_msec() + int(connect_seconds * 1000)
	while http.get_status() in [HTTPClient.STATUS_RESOLVING, HTTPClient.STATUS_CONNECTING]:
		http.poll()
		if OS.get_ticks_msec() > deadline:
			break
		yield(get_tree(), "idle_frame")
	if http.get_status() != HTTPClient.STATUS_CONNECTED:
		http.close()
		return _answered_not("unavailable", "could not reach the server at %s" % base_url)
	var headers := PoolStringArray(["Accept: " + accept])
	headers.append_array(PoolStringArray(extra))
	if bearer_token != "":
		headers.append("Authorization: Bearer " + bearer_token)
	var text := ""
	if body != null:
		text = to_json(body)
		headers.append("Content-Type: application/json")
	else:
		headers.append("Content-Length: 0")
	err = http.request(method, address.prefix + path, headers, text)
	deadline = OS.get_ticks_msec() + int(answer_seconds * 1000)
	while err == OK and http.get_status() == HTTPClient.STATUS_REQUESTING and OS.get_ticks_msec() < deadline:
		yield(get_tree(), "idle_frame")
		http.poll()
	if err != OK or not http.has_response():
		http.close()
		return _answered_not("server_gone", "the connection to %s broke before the answer" % base_url)
	return {"ok": true, "http": http, "status": http.get_response_code(), "error": "", "message": ""}


# Reads an answer's body whole: {"ok", "status", "data", "error", "message"}. A 204 has no body to
# parse; an error's body is the server's {"error": {"code", "message"}}.
func _answer(opened: Dictionary):
	var http: HTTPClient = opened.http
	var status: int = opened.status
	var bytes := PoolByteArray()
	var deadline := OS.get_ticks_msec() + int(answer_seconds * 1000)
	yield(get_tree(), "idle_frame")
	if status == 204:
		# no body, whatever the head says: Godot 3.2 would wait for the end of a body a "Connection:
		# close" answer never sends
		http.close()
		return {"ok": true, "status": status, "data": null, "error": "", "message": ""}
	while http.get_status() == HTTPClient.STATUS_BODY and OS.get_ticks_msec() < deadline:
		http.poll()
		var chunk := http.read_response_body_chunk()
		if chunk.size() > 0:
			bytes.append_array(chunk)
		else:
			yield(get_tree(), "idle_frame")
	var whole := http.get_status() in [HTTPClient.STATUS_CONNECTED, HTTPClient.STATUS_DISCONNECTED]
	http.close()
	if not whole:
		return _answered_not("server_gone", "the connection broke in the middle of the answer", "", status)
	var parsed := JSON.parse(bytes.get_string_from_utf8())
	if status >= 200 and status < 300:
		if parsed.error != OK:
			return _answered_not("bad_answer", "the answer is not JSON", "", status)
		return {"ok": true, "status": status, "data": parsed.result, "error": "", "message": ""}
	var error = parsed.result.get("error") if parsed.error == OK and parsed.result is Dictionary else null
	if error is Dictionary and error.get("code") is String:
		return _answered_not(error.code, str(error.get("message", "")), "", status)
	return _answered_not("bad_answer", "HTTP %d without an error JSON" % status, "", status)


func _address() -> Dictionary:
	var rest := base_url.strip_edges()
	var tls := rest.begins_with("https://")
	rest = rest.substr(rest.find("://") + 3, rest.length()) if rest.find("://") >= 0 else rest
	var prefix := ""
	var slash := rest.find("/")
	if slash >= 0:
		prefix = rest.substr(slash, rest.length()).trim_suffix("/")
		rest = rest.substr(0, slash)
	var port := 443 if tls else 80
	var colon := rest.find_last(":")
	if colon >= 0:
		port = int(rest.substr(colon + 1, rest.length()))
		rest = rest.substr(0, colon)
	return {"host": rest, "port": port, "tls": tls, "prefix": prefix}



# An answer's header by name (case-insensitive), or "".
func _header(http: HTTPClient, name: String) -> String:
	var headers: Dictionary = http.get_response_headers_as_dictionary()
	for key in headers:
		if str(key).to_lower() == name:
			return str(headers[key])
	return ""

func _path(session: String) -> String:
	return "/v1/sessions/" + session.percent_encode()


func _set_state(session: String, state: String) -> void:
	if _states.get(session, "idle") == state:
		return
	_states[session] = state
	emit_signal("state_changed", session, state)
