"""Help > Keyboard Shortcuts lists keys a keyboard has, each menu under one heading."""

from __future__ import annotations

from editor.window.help_menu import show_shortcuts

# What the platform's standard bindings add on Linux: media and office keys, which read as words
MEDIA_KEYS = {"New", "Open", "Save", "Close", "Undo", "Redo", "Cut", "Copy", "Paste", "Find", "Back", "Forward",
              "Refresh", "Help", "Print"}


def test_the_shortcut_list_names_no_media_keys_and_each_menu_once(window):
    dialog = show_shortcuts(window)
    try:
        tree = dialog.tree
        items = [tree.topLevelItem(i) for i in range(tree.topLevelItemCount())]
        headings = [item.text(0) for item in items if not item.text(1)]
        assert len(headings) == len(set(headings)), f"a menu's heading shows twice: {headings}"
        assert "Edit" in headings and "Edit \u25b8 Arrange" in headings
        listed = dialog.listed()
        for action, keys in listed.items():
            for chord in keys.split(", "):
                assert chord.rpartition("+")[2] not in MEDIA_KEYS, f"{action} lists the media key {chord!r}: {keys}"
        assert listed["Open"] == "Ctrl+O" and listed["Save As"] == "Ctrl+Shift+S"
        assert "Ctrl+Z" in listed["Undo"] and "Ctrl+F" in listed["Find Node"]
        dialog.resize(460, 900)
        dialog.grab().save("/tmp/parley-shortcuts.png")
    finally:
        dialog.close()
