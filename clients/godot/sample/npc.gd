# A quartermaster who talks through `parley serve`: the reply appears as subtitles while it streams
# (reply tokens only, never the Tool Call's JSON), the game answers its check_stock tool from its own
# stock, and a turn is cancelled when the player walks away. It prints what the player sees.
# (Godot 4; its Godot 3 twin, ../godot3/sample/npc.gd, is the one that ran headless here.)
extends Control

const ASSET := "tool_calling.json"
const NPC := "quartermaster"

var stock := {"arrows": 240}
@onready var subtitle: Label = $Subtitle


func _ready() -> void:
	if OS.get_environment("PARLEY_URL") != "":
		Parley.base_url = OS.get_environment("PARLEY_URL")
	Parley.token.connect(_on_token)
	await Parley.delete_session(NPC)  # a new conversation each time the scene starts
	var made: Dictionary = await Parley.create_session(ASSET, NPC)
	if not made.ok:
		print("[no Parley server at %s: %s]" % [Parley.base_url, made.message])
		get_tree().quit(1)
		return
	await _talk("How many arrows are there?", {"check_stock": _check_stock})
	# the player asks again and walks away while the quartermaster looks it up
	Parley.tool_request.connect(_walk_away, CONNECT_ONE_SHOT)
	await _talk("And the bolts?", {})
	get_tree().quit(0)


func _talk(line: String, tools: Dictionary) -> void:
	print("Player: " + line)
	subtitle.text = ""
	var result: Dictionary = await Parley.say(NPC, line, tools)
	if result.ok:
		print("Quartermaster: " + subtitle.text)
	else:
		print("[the player walks away: %s]" % result.error)
		subtitle.text = ""


func _on_token(session: String, text: String, _node: String, is_reply: bool) -> void:
	if session == NPC and is_reply:
		subtitle.text += text


func _check_stock(_arguments: Dictionary) -> String:
	var answer: String = "%d arrows" % stock.arrows
	print("[the game looks up check_stock: %s]" % answer)
	return answer


func _walk_away(session: String, _call_id: String, _tool_name: String, _arguments: Dictionary,
		_node: String) -> void:
	Parley.cancel(session)
