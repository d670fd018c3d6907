"""Asset files on a real file system (issue 14, defects 15, 16 and 19): saving through a symlink and
keeping the mode, refusing what is not a file or is far too large, and cleaning up after killed saves."""

from __future__ import annotations

import os
import stat
import threading
import time

import pytest

from runtime.asset import file as asset_file
from runtime.asset.file import load_asset, load_asset_for_editing, save_asset
from runtime.asset.model import Asset, new_node
from runtime.cli import main as parley
from runtime.files.writing import atomic_write_text
from runtime.problems import AssetError

posix_only = pytest.mark.skipif(os.name != "posix", reason="symlinks, modes and FIFOs as POSIX has them")


def _asset() -> Asset:
    return Asset(start_node="reply", nodes=[new_node("Generate", "reply", system_prompt="Hello.")])


# --- defect 15: symlinks and modes ---------------------------------------------------------------


@posix_only
def test_saving_through_a_symlink_keeps_the_link_and_writes_its_target(tmp_path):
    """Defect 15: the link was replaced by a file, and the file it pointed to kept the old asset."""
    (tmp_path / "assets").mkdir()
    target = tmp_path / "assets" / "guard.json"
    save_asset(_asset(), target)
    link = tmp_path / "guard-link.json"
    link.symlink_to(target)
    changed = _asset().model_copy(update={"name": "Changed"})
    save_asset(changed, link)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert load_asset(target).name == "Changed"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["assets", "guard-link.json"], "no temporary file left"
    assert [p.name for p in target.parent.iterdir()] == ["guard.json"]


@posix_only
def test_saving_keeps_the_files_mode(tmp_path):
    """Defect 15: a 0644 file became 0600 (the temporary file's mode)."""
    path = tmp_path / "guard.json"
    save_asset(_asset(), path)
    for mode in (0o644, 0o664, 0o600):
        path.chmod(mode)
        save_asset(_asset(), path)
        assert stat.S_IMODE(path.stat().st_mode) == mode


@posix_only
def test_a_new_file_gets_the_usual_mode(tmp_path):
    old = os.umask(0o022)
    try:
        save_asset(_asset(), tmp_path / "new.json")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o644


# --- defect 16: what is not a file, or far too large ---------------------------------------------


@posix_only
def test_a_device_is_refused_unread(capsys):
    """Defect 16: `parley validate /dev/zero` grew until MemoryError."""
    assert parley(["validate", "/dev/zero"]) == 1
    out = capsys.readouterr().out
    assert "/dev/zero: error: not a file but a device" in out


@posix_only
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    """Defect 16: a FIFO hung the command (opening it waits for a writer)."""
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    result: list[BaseException] = []

    def load() -> None:
        for loader in (load_asset, load_asset_for_editing):
            try:
                loader(fifo)
            except AssetError as exc:
                result.append(exc)

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    worker.join(5)
    if worker.is_alive():  # unblock the open so the thread ends, then fail
        with open(fifo, "w"):
            pass
        pytest.fail("loading a FIFO blocked")
    assert len(result) == 2 and all("a pipe (FIFO)" in str(exc) for exc in result)


def test_a_folder_is_refused(tmp_path):
    with pytest.raises(AssetError, match="not a file but a folder"):
        load_asset(tmp_path)


def test_a_file_past_the_size_limit_is_refused_unread(tmp_path, monkeypatch):
    path = tmp_path / "big.json"
    path.write_bytes(b" " * 2048 + b"{}")
    monkeypatch.setattr(asset_file, "MAX_ASSET_BYTES", 1024)

    def unread(*_args, **_kwargs):
        raise AssertionError("read a file past the limit")

    monkeypatch.setattr(asset_file, "read_input_text", unread)
    with pytest.raises(AssetError) as info:
        load_asset(path)
    assert "an asset is at most" in info.value.problems[0].message
    assert info.value.problems[0].file == str(path)


def test_the_size_limit_leaves_room_for_a_50_mb_system_prompt():
    assert asset_file.MAX_ASSET_BYTES >= 60 * 2**20


# --- defect 19 (first half): temporary files a killed save left ----------------------------------


def _leftover(folder, name: str, age_s: float):
    path = folder / name
    path.write_text("{half an asset")
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_old_temporary_files_of_the_asset_are_removed_on_the_next_save(tmp_path):
    """Defect 19: the .tmp files of a save killed midway were never cleaned up."""
    old = _leftover(tmp_path, ".guard.json.abc123_z.tmp", 3600)
    young = _leftover(tmp_path, ".guard.json.k2j4h5g6.tmp", 5)  # another save may be writing it
    other_asset = _leftover(tmp_path, ".inn.json.abc123_z.tmp", 3600)
    not_ours = _leftover(tmp_path, ".guard.json.notes.tmp", 3600)
    save_asset(_asset(), tmp_path / "guard.json")
    assert not old.exists()
    assert young.exists() and other_asset.exists() and not_ours.exists()


def test_old_temporary_files_are_removed_when_the_editor_opens_the_asset(tmp_path):
    save_asset(_asset(), tmp_path / "guard.json")
    old = _leftover(tmp_path, ".guard.json.0a1b2c3d.tmp", 3600)
    load_asset_for_editing(tmp_path / "guard.json")
    assert not old.exists()


def test_a_failed_write_leaves_no_temporary_file_and_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "guard.json"
    atomic_write_text(path, "old")

    def fail(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError):
        atomic_write_text(path, "new")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["guard.json"]


def test_lone_surrogates_are_written_as_replacement_characters(tmp_path):
    """Defect 4: the atomic write raised UnicodeEncodeError (history and recovery files use it too)."""
    atomic_write_text(tmp_path / "x.txt", "a\ud800b")
    assert (tmp_path / "x.txt").read_text(encoding="utf-8") == "a\ufffdb"
