# A quartermaster who talks through `parley serve`: the reply appears as subtitles while it streams
# (reply tokens only, never the Tool Call's JSON), the game answers its check_stock tool from its own
# stock, and a turn is cancelled when the player walks away. It prints what the player sees, so it
# runs headless too: PARLEY_URL=http://127.0.0.1:8765 godot3-server --path clients/godot/godot3
extends Control

const ASSET := "tool_calling.json"
const NPC := "quartermaster"

var stock := {"arrows": 240}
onready var subtitle: Label = $Subtitle


func _ready():
	if OS.get_environment("PARLEY_URL") != "":
		Parley.base_url = OS.get_environment("PARLEY_URL")
	Parley.connect("token", self, "_on_token")
	yield(Parley.delete_session(NPC), "completed")  # a new conversation each time the scene starts
	var made = yield(Parley.create_session(ASSET, NPC), "completed")
	if not made.ok:
		print("[no Parley server at %s: %s]" % [Parley.base_url, made.message])
		_quit(1)
		return
	yield(_talk("How many arrows are there?", {"check_stock": funcref(self, "_check_stock")}), "completed")
	# the player asks again and walks away while the quartermaster looks it up
	Parley.connect("tool_request", self, "_walk_away", [], CONNECT_ONESHOT)
	yield(_talk("And the bolts?", {}), "completed")
	_quit(0)


func _talk(line: String, tools: Dictionary):
	print("Player: " + line)
	subtitle.text = ""
	var result = yield(Parley.say(NPC, line, tools), "completed")
	if result.ok:
		print("Quartermaster: " + subtitle.text)
	else:
		print("[the player walks away: %s]" % result.error)
		subtitle.text = ""


func _on_token(session, text, _node, is_reply):
	if session == NPC and is_reply:
		subtitle.text += text


func _check_stock(_arguments):
	var answer: String = "%d arrows" % stock.arrows
	print("[the game looks up check_stock: %s]" % answer)
	return answer


func _walk_away(session, _call_id, _tool_name, _arguments, _node):
	Parley.cancel(session)


func _quit(code: int) -> void:
	OS.exit_code = code
	get_tree().quit()
