# The protocol test set's driver (clients/protocol/README.md), run through the addon's own API: reads
# PARLEY_PROTOCOL, PARLEY_URL, PARLEY_TOKEN and PARLEY_CLIENT, prints `step N JSON` for each step and
# then `protocol done`, and quits.
extends Node

var client := ""


func _ready():
	Parley.base_url = OS.get_environment("PARLEY_URL")
	Parley.bearer_token = OS.get_environment("PARLEY_TOKEN")
	client = OS.get_environment("PARLEY_CLIENT")
	var file := File.new()
	if file.open(OS.get_environment("PARLEY_PROTOCOL"), File.READ) != OK:
		print("cannot read PARLEY_PROTOCOL")
		_quit(2)
		return
	var script = _named(JSON.parse(file.get_as_text()).result)
	file.close()
	var n := 0
	for step in script.steps:
		var seen = yield(_step(step), "completed")
		print("step %d %s" % [n, to_json(seen)])
		n += 1
	print("protocol done")
	_quit(0)


func _quit(code: int) -> void:
	OS.exit_code = code
	get_tree().quit()


func _named(value):
	if value is String:
		return value.replace("{client}", client)
	if value is Array:
		var items := []
		for item in value:
			items.append(_named(item))
		return items
	if value is Dictionary:
		var named := {}
		for key in value:
			named[key] = _named(value[key])
		return named
	return value


func _step(step: Dictionary):
	yield(get_tree(), "idle_frame")
	var session: String = step.get("session", "")
	if step.do == "health":
		var answer = yield(Parley.health(), "completed")
		return {"status": answer.data.status} if answer.ok else {"error": answer.error}
	if step.do == "create":
		var answer = yield(Parley.create_session(step.asset, session), "completed")
		return {"session": answer.data.id, "turns": answer.data.turns} if answer.ok else {"error": answer.error}
	if step.do == "say":
		var turn = Parley.start(session, step.line, step.get("tools", {}))
		var seen := _watch(turn)
		if step.get("cancel_at", "") == "tool_request":
			turn.connect("tool_request", self, "_cancel", [session])
		return _observed(seen, yield(turn.wait(), "completed"))
	if step.do == "double_text":
		var first = Parley.start(session, step.line, {})
		var first_seen := _watch(first)
		var request = yield(first, "tool_request")  # [call_id, tool_name, arguments, node]
		var second = Parley.start(session, step.second, step.tools)
		var second_seen := _watch(second)
		while not second_seen.queued and not second.done:
			yield(get_tree(), "idle_frame")
		yield(Parley.answer_tool(session, request[0], step.tools[request[1]]), "completed")
		var first_result = yield(first.wait(), "completed")
		var second_result = yield(second.wait(), "completed")
		return {"first": _observed(first_seen, first_result), "second": _observed(second_seen, second_result)}
	if step.do == "history":
		var answer = yield(Parley.turns(session), "completed")
		if not answer.ok:
			return {"error": answer.error}
		var lines := []
		for turn in answer.data.turns:
			lines.append(turn.line)
		return {"turns": lines.size(), "lines": lines}
	if step.do == "delete":
		var answer = yield(Parley.delete_session(session), "completed")
		return {"deleted": true} if answer.ok else {"error": answer.error}
	return {"error": "unknown step " + step.do}


func _watch(turn) -> Dictionary:
	var seen := {"tools": [], "shown": "", "spoken": [], "queued": false, "tags": {}}
	turn.connect("token", self, "_token", [seen])
	turn.connect("speak", self, "_speak", [seen])
	turn.connect("tool_request", self, "_tool", [seen])
	turn.connect("tag", self, "_tag", [seen])
	turn.connect("event", self, "_event", [seen])
	return seen


func _observed(seen: Dictionary, result: Dictionary) -> Dictionary:
	seen["reply"] = result.reply
	seen["error"] = result.error
	seen["line"] = result.line
	return seen


func _token(text, _node, is_reply, seen):
	if is_reply:
		seen.shown += text


func _speak(text, _node, _is_reply, seen):
	seen.spoken.append(text)


func _tool(_call_id, tool_name, _arguments, _node, seen):
	seen.tools.append(tool_name)


func _tag(name, value, seen):
	seen.tags[name] = value


func _event(kind, _data, seen):
	if kind == "turn_queued":
		seen.queued = true


func _cancel(_call_id, _tool, _arguments, _node, session):
	Parley.cancel(session)
