"""Backend > Attach to Server… finds a `parley serve` running on this computer whatever port it took
(`--port 0`), instead of offering parley serve's default 8765."""

from __future__ import annotations

from editor.dialogs.attach import ADDRESS_KEY, AttachDialog
from editor.settings import app_settings
from runtime.backends.scripted import ScriptedBackend
from runtime.resources import examples_dir
from runtime.serve import running
from runtime.serve.client import ParleyClient
from runtime.serve.server import running_server

WAIT_MS = 30_000


def test_the_dialog_offers_the_server_running_here_on_its_own_port(window, qtbot):
    # An address remembered from an earlier server, on this computer, that is gone now
    app_settings().setValue(ADDRESS_KEY, "http://127.0.0.1:8765")
    with running_server(ScriptedBackend(), [examples_dir()]) as url, ParleyClient(url) as game:
        announced = running.announce(url, [str(examples_dir())], False)  # as `parley serve` does once it listens
        try:
            game.create_session("chat.json")
            dialog = window.open_attach_dialog()
            assert isinstance(dialog, AttachDialog)
            assert dialog.address.text() == url, "the server running here, not the default port"
            assert not url.endswith(":8765")
            assert dialog.running_here.isVisibleTo(dialog) and dialog.running_here.count() == 1
            assert dialog.running_here.itemText(0).startswith(url) and "examples" in dialog.running_here.itemText(0)
            with qtbot.waitSignal(dialog.listed, timeout=WAIT_MS) as listed:
                assert dialog.list_sessions()
            assert listed.args == [True] and dialog.table.rowCount() == 1
            dialog.grab().save("/tmp/parley-attach-running-here.png")
            dialog.reject()
        finally:
            running.withdraw(announced)


def test_a_remembered_address_on_another_computer_is_kept(window):
    app_settings().setValue(ADDRESS_KEY, "http://10.0.0.5:8765")
    announced = running.announce("http://127.0.0.1:40123", ["/games/assets"], True)
    try:
        dialog = window.open_attach_dialog()
        assert dialog.address.text() == "http://10.0.0.5:8765", "the designer's own server stays first"
        assert dialog.running_here.itemData(0) == "http://127.0.0.1:40123", "the local one is still offered"
        dialog.reject()
    finally:
        running.withdraw(announced)


def test_with_no_server_running_here_the_dialog_says_so(window):
    dialog = window.open_attach_dialog()
    assert dialog.address.text() == "http://127.0.0.1:8765"
    assert dialog.running_here.isHidden()
    assert "No parley serve is running on this computer" in dialog.status.text()
    dialog.reject()
