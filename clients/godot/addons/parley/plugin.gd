@tool
extends EditorPlugin

# Enabling the plugin adds the client as the autoload "Parley"; disabling it takes it away.

func _enable_plugin() -> void:
	add_autoload_singleton("Parley", "res://addons/parley/parley.gd")


func _disable_plugin() -> void:
	remove_autoload_singleton("Parley")
