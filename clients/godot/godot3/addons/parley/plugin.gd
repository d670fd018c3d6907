tool
extends EditorPlugin

# Enabling the plugin adds the client as the autoload "Parley"; disabling it takes it away.

func enable_plugin():
	add_autoload_singleton("Parley", "res://addons/parley/parley.gd")


func disable_plugin():
	remove_autoload_singleton("Parley")
