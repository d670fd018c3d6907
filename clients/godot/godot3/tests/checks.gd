# The addon's own checks, beyond the protocol test set: prints `ok NAME` for each that passed (or
# `FAIL NAME: why`) and `all passed` at the end, and quits with 0 only then. Reads PARLEY_URL (the
# cutting proxy before a scripted server), PARLEY_TOKEN and PARLEY_CLOSED_URL (a port nobody listens on).
extends Node

const EventStream = preload("res://addons/parley/parley.gd").EventStream

var failures := 0
var states := []


func _ready():
	Parley.base_url = OS.get_environment("PARLEY_URL")
	Parley.bearer_token = OS.get_environment("PARLEY_TOKEN")
	_event_stream()

	Parley.bearer_token = ""
	var refused = yield(Parley.health(), "completed")
	_check("token required", not refused.ok and refused.status == 401 and refused.error == "unauthorized", refused)
	Parley.bearer_token = OS.get_environment("PARLEY_TOKEN")

	yield(Parley.create_session("tool_calling.json", "godot.checks"), "completed")
	Parley.connect("tool_request", self, "_answer_from_signal")
	Parley.connect("state_changed", self, "_state")
	var result = yield(Parley.say("godot.checks", "How many arrows are there?"), "completed")
	Parley.disconnect("tool_request", self, "_answer_from_signal")
	_check("tool answered from a signal", result.reply == "godot.checks/reply heard: 12 arrows"
			and states == ["sending", "running", "waiting_tool", "running", "idle"], [result, states])

	var deleted = yield(Parley.delete_session("godot.checks"), "completed")
	_check("delete answers 204", deleted.ok and deleted.status == 204 and deleted.data == null, deleted)

	var session := "half.tool_request.godot.checks"
	yield(Parley.create_session("tool_calling.json", session), "completed")
	var turn = Parley.start(session, "How many arrows are there?", {"check_stock": funcref(self, "_count")})
	var shown := []
	turn.connect("token", self, "_shown", [shown])
	result = yield(turn.wait(), "completed")
	var reply := session + "/reply heard: 7 arrows"
	_check("a stream cut mid-event resumed", result.ok and result.reply == reply
			and PoolStringArray(shown).join("") == reply and turn.seen > 0, [result, shown])

	Parley.base_url = OS.get_environment("PARLEY_CLOSED_URL")
	var nobody = yield(Parley.health(), "completed")
	result = yield(Parley.say("anyone", "hello"), "completed")
	_check("a closed port is unavailable", nobody.error == "unavailable" and result.error == "unavailable"
			and not result.ok, [nobody, result])

	if failures == 0:
		print("all passed")
	OS.exit_code = 0 if failures == 0 else 1
	get_tree().quit()


func _check(name: String, passed: bool, seen) -> void:
	if passed:
		print("ok " + name)
	else:
		failures += 1
		print("FAIL %s: %s" % [name, str(seen)])


# Events split at every byte (a UTF-8 character in pieces, a "\r\n" in halves), keep-alive comments,
# ids and a tag event: the same events as the stream fed whole.
func _event_stream() -> void:
	var text := ": keep-alive\r\n\r\nid: r1.1\r\nevent: token\r\n"
	text += "data: {\"node\": \"talk\", \"text\": \"Hé — 龍🐉\", \"reply\": true}\r\n\r\n"
	text += ": keep-alive\n\nid: r1.2\nevent: tag\ndata: {\"name\": \"mood\", \"value\": \"angry\", \"node\": \"feel\"}\r"
	text += "\r"
	var bytes := text.to_utf8()
	var whole := EventStream.new()
	var at_once := whole.feed(bytes) + whole.end()
	var split := EventStream.new()
	var in_pieces := []
	for i in range(bytes.size()):
		in_pieces += split.feed(bytes.subarray(i, i))
	in_pieces += split.end()
	var expected := [
		{"kind": "token", "data": {"node": "talk", "text": "Hé — 龍🐉", "reply": true}, "id": "r1.1", "bad": false},
		{"kind": "tag", "data": {"name": "mood", "value": "angry", "node": "feel"}, "id": "r1.2", "bad": false}]
	_check("event stream", to_json(at_once) == to_json(expected) and to_json(in_pieces) == to_json(expected),
			[at_once, in_pieces])


func _answer_from_signal(session, call_id, tool_name, _arguments, _node):
	if session == "godot.checks" and tool_name == "check_stock":
		Parley.answer_tool(session, call_id, "12 arrows")


func _state(session, state):
	if session == "godot.checks":
		states.append(state)


func _count(_arguments):
	return "7 arrows"


func _shown(text, _node, is_reply, shown):
	if is_reply:
		shown.append(text)
