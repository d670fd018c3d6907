"""Parked caches have a RAM cap of their own: past it the least recently parked spill to disk, and
come back bit for bit on their node's next call (``ParkedCaches``; the last tests on the sample model)."""

from __future__ import annotations

import builtins
import ctypes
import logging
from pathlib import Path
from typing import Any, Self

import pytest

from runtime.backends.llama import PARK_BUDGET_MIB, LlamaBackend, ParkedCache, ParkedCaches, Snapshot
from runtime.cli import build_parser, main
from runtime.cli.serve import _backend
from runtime.models.journal import EMPTY, Chunk
from runtime.problems import BackendError
from tests.runtime.backends.test_kv_budget import EXAMPLES, example, mib, talk

SIZE = 4096


def parked(key: str, fill: int, size: int = SIZE, read_start: int = 3) -> ParkedCache:
    data = (ctypes.c_uint8 * size)(*((fill + i) % 256 for i in range(size)))
    journal = EMPTY.then([Chunk(tuple(range(fill, fill + 5)), 5)])
    return ParkedCache(Snapshot(key, journal, data), read_start)


def files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.kv"))


def test_past_the_cap_the_least_recently_parked_go_to_disk(tmp_path):
    caches = ParkedCaches(2 * SIZE + 10, tmp_path)
    for n, key in enumerate(["npc-a/reply", "npc-b/reply", "npc-c/reply"]):
        caches.put(parked(key, n))
    assert [k for k, _ in caches.items()] == ["npc-b/reply", "npc-c/reply"]
    assert caches.counts() == (2, 2 * SIZE, 1, SIZE) and caches.spills == 1
    assert len(files(tmp_path)) == 1
    caches.put(parked("npc-d/reply", 3))  # npc-b is now the least recently parked
    assert [k for k, _ in caches.items()] == ["npc-c/reply", "npc-d/reply"]
    assert caches.counts() == (2, 2 * SIZE, 2, 2 * SIZE) and len(files(tmp_path)) == 2
    assert all(key in caches for key in ["npc-a/reply", "npc-b/reply", "npc-c/reply", "npc-d/reply"])


def test_a_spilled_cache_comes_back_bit_for_bit_once_and_its_file_goes(tmp_path):
    caches = ParkedCaches(0, tmp_path)  # nothing stays in RAM
    original = parked("npc-a/reply", 7, read_start=11)
    caches.put(original)
    assert caches.counts() == (0, 0, 1, SIZE) and len(files(tmp_path)) == 1
    back = caches.take("npc-a/reply")
    assert back is not None and back is not original
    assert bytes(back.snapshot.data) == bytes(original.snapshot.data)
    assert back.snapshot.journal == original.snapshot.journal and back.read_start == 11
    assert back.snapshot.key == "npc-a/reply" and len(back.snapshot.data) == SIZE
    assert files(tmp_path) == [] and caches.counts() == (0, 0, 0, 0)
    assert caches.take("npc-a/reply") is None


def test_a_cache_in_ram_is_taken_as_it_was_parked(tmp_path):
    caches = ParkedCaches(10 * SIZE, tmp_path)
    original = parked("npc-a/reply", 1)
    caches.put(original)
    assert caches.take("npc-a/reply") is original and caches.take("npc-a/reply") is None
    assert caches.spills == 0 and list(tmp_path.iterdir()) == []  # no folder made without a spill


def test_parking_a_node_again_replaces_its_spilled_file(tmp_path):
    caches = ParkedCaches(0, tmp_path)
    caches.put(parked("npc-a/reply", 1))
    caches.put(parked("npc-a/reply", 2))
    assert caches.counts() == (0, 0, 1, SIZE) and len(files(tmp_path)) == 1
    assert bytes(caches.take("npc-a/reply").snapshot.data) == bytes(parked("x", 2).snapshot.data)


def test_forget_deletes_a_spilled_file_and_close_the_folder(tmp_path):
    caches = ParkedCaches(SIZE, tmp_path)
    for n, key in enumerate(["npc-a/reply", "npc-b/reply", "npc-c/reply"]):
        caches.put(parked(key, n))
    assert len(files(tmp_path)) == 2
    caches.forget("npc-a/reply")
    assert len(files(tmp_path)) == 1 and "npc-a/reply" not in caches and caches.take("npc-a/reply") is None
    caches.forget("npc-c/reply")  # the one in RAM
    assert caches.counts() == (0, 0, 1, SIZE)
    caches.close()
    assert list(tmp_path.iterdir()) == [] and caches.counts() == (0, 0, 0, 0)


def test_file_names_are_safe_whatever_the_key(tmp_path):
    keys = ["../../etc/passwd", "npc/../../x", "C:\\npc\\reply", "dragon 🐉/reply", "a" * 500, "\x00/nul",
            "npc-a/reply"]
    caches = ParkedCaches(0, tmp_path)
    for n, key in enumerate(keys):
        caches.put(parked(key, n))
    written = files(tmp_path)
    assert len(written) == len(keys)
    folder = written[0].parent
    assert folder.parent == tmp_path and all(f.parent == folder for f in written)
    assert all(len(f.name) < 100 and f.name.isascii() for f in written)
    for n, key in enumerate(keys):
        assert bytes(caches.take(key).snapshot.data) == bytes(parked(key, n).snapshot.data)


def test_a_full_disk_drops_the_snapshot_and_warns_once(tmp_path, monkeypatch, caplog):
    real_open = builtins.open

    def full_disk(path: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        return real_open("/dev/full", "wb") if mode == "xb" else real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr("runtime.backends.llama.open", full_disk, raising=False)
    caches = ParkedCaches(0, tmp_path)
    with caplog.at_level(logging.DEBUG, logger="runtime.backends.llama"):
        caches.put(parked("npc-a/reply", 1))
        caches.put(parked("npc-b/reply", 2))
    assert caches.counts() == (0, 0, 0, 0) and caches.failures == 2 and caches.spills == 0
    assert caches.take("npc-a/reply") is None and files(tmp_path) == []
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "npc-a/reply" in warnings[0].getMessage(), warnings
    assert "No space left" in warnings[0].getMessage()


def test_a_folder_that_cannot_be_made_drops_the_snapshot(tmp_path, caplog):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the spill folder should go")
    caches = ParkedCaches(SIZE, blocker / "parked")
    caches.put(parked("npc-a/reply", 1))
    with caplog.at_level(logging.WARNING, logger="runtime.backends.llama"):
        caches.put(parked("npc-b/reply", 2))  # npc-a would spill
    assert caches.failures == 1 and "npc-a/reply" not in caches and "npc-b/reply" in caches
    assert any("npc-a/reply" in r.getMessage() and "could not be written" in r.getMessage() for r in caplog.records)


def test_a_file_changed_on_disk_is_not_restored(tmp_path, caplog):
    caches = ParkedCaches(0, tmp_path)
    caches.put(parked("npc-a/reply", 1))
    caches.put(parked("npc-b/reply", 2))
    a, b = files(tmp_path)
    a.write_bytes(b"\x00" + a.read_bytes()[1:])  # same length, one byte changed
    b.write_bytes(b.read_bytes()[:-1])  # cut short
    with caplog.at_level(logging.WARNING, logger="runtime.backends.llama"):
        assert caches.take("npc-a/reply") is None and caches.take("npc-b/reply") is None
    assert len([r for r in caplog.records if "changed on disk" in r.getMessage()]) == 2
    assert files(tmp_path) == []


@pytest.mark.parametrize("meanwhile", ["take", "forget"])
def test_a_cache_taken_or_forgotten_while_it_is_written_leaves_no_file(tmp_path, monkeypatch, meanwhile):
    real_open = builtins.open
    caches = ParkedCaches(0, tmp_path)
    got: list[Any] = []

    class Writer:
        def __init__(self, f: Any) -> None:
            self.f = f

        def __enter__(self) -> Self:
            return self

        def __exit__(self, *exc: object) -> None:
            self.f.close()

        def write(self, data: Any) -> int:
            written = self.f.write(data)
            # the node's next call (or its release) comes while the file is being written
            got.append(caches.take("npc-a/reply") if meanwhile == "take" else caches.forget("npc-a/reply"))
            return written

    def slow_open(path: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        f = real_open(path, mode, *args, **kwargs)
        return Writer(f) if mode == "xb" else f

    monkeypatch.setattr("runtime.backends.llama.open", slow_open, raising=False)
    original = parked("npc-a/reply", 1)
    caches.put(original)
    assert got == [original if meanwhile == "take" else None]
    assert files(tmp_path) == [] and caches.counts() == (0, 0, 0, 0) and caches.spills == 0
    assert caches.take("npc-a/reply") is None


def test_the_backend_counts_spills_releases_their_files_and_removes_the_folder_on_close(tmp_path):
    backend = LlamaBackend(park_mib=0, park_dir=tmp_path)
    backend.store_parked(parked("npc-a/reply", 1))
    backend.store_parked(parked("npc-b/reply", 2))
    stats = backend.kv_stats()
    assert (stats.parked, stats.spilled, stats.spills, stats.park_budget_mib) == (0, 2, 2, 0), stats
    assert stats.spilled_mib == pytest.approx(2 * SIZE / 2**20)
    backend.release("npc-a/reply")  # a released session's file goes with it
    assert len(files(tmp_path)) == 1 and backend.kv_stats().spilled == 1
    backend.close()
    assert list(tmp_path.iterdir()) == [] and backend.kv_stats().spilled == 0
    for bad in (-1, float("nan")):
        with pytest.raises(BackendError, match="parked caches' RAM cap"):
            LlamaBackend(park_mib=bad)


# --- on the sample model --------------------------------------------------------------------------


@pytest.fixture()
def backends():
    made: list[LlamaBackend] = []

    def make(**kwargs: Any) -> LlamaBackend:
        made.append(LlamaBackend(str(EXAMPLES), **kwargs))
        return made[-1]

    yield make
    for b in made:
        b.close()


@pytest.mark.model
def test_npcs_spilled_to_disk_say_what_they_say_without_a_budget(sample_model, backends, tmp_path):
    reference = backends()
    budget = mib(sample_model, reference, 2048) * 1.5  # one chat context at a time
    in_ram = backends(kv_budget_mib=budget)
    spilling = backends(kv_budget_mib=budget, park_mib=0, park_dir=tmp_path)  # every parked cache on disk
    assets = {f"npc-{i}": example("chat.json", sample_model) for i in range(3)}
    expected = talk(reference, assets, 3)
    assert talk(in_ram, assets, 3, budget) == expected
    got = talk(spilling, assets, 3, budget)
    assert got == expected  # replies, journals and what each node read: bit for bit
    stats = spilling.kv_stats()
    # as parked in RAM (test_kv_budget): each turn parks the NPC before; every turn after the first
    # round restores its NPC's cache, here from a file
    assert stats.parks == 8 and stats.spills == 8 and stats.restores == 6 and stats.spill_failures == 0, stats
    assert stats.parked == 0 and stats.spilled == 2 and stats.spilled_mib > 0, stats
    assert len(files(tmp_path)) == 2
    for sid, turns in got.items():
        for turn in turns[1:]:
            prompt, reused, evaluated, cold = turn[2]["reply"]
            assert not cold and reused > 0 and evaluated < prompt, (sid, turn[2])
    spilling.close()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.model
def test_npcs_whose_disk_refuses_their_caches_read_them_again_and_say_the_same(sample_model, backends, tmp_path):
    reference = backends()
    budget = mib(sample_model, reference, 2048) * 1.5
    blocker = tmp_path / "full"
    blocker.write_text("a file where the spill folder should go")
    refused = backends(kv_budget_mib=budget, park_mib=0, park_dir=blocker / "parked")
    assets = {f"npc-{i}": example("chat.json", sample_model) for i in range(2)}
    expected = talk(reference, assets, 2)
    got = talk(refused, assets, 2, budget)
    # the same replies and journals; only the reading differs (read again, not restored)
    assert {s: [t[:2] for t in turns] for s, turns in got.items()} == \
        {s: [t[:2] for t in turns] for s, turns in expected.items()}
    stats = refused.kv_stats()
    assert stats.parks == 3 and stats.spill_failures == 3 and stats.restores == 0 and stats.spilled == 0, stats
    for turns in got.values():
        assert turns[1][2]["reply"][3]  # cold: its conversation read again


# --- parley serve --park-budget -------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "said"), [
    (["--park-budget", "-1"], "--park-budget must be 0 or more GB, not -1"),
    (["--park-budget", "nan"], "--park-budget must be 0 or more GB"),
    (["--backend", "scripted", "--park-budget", "1"], "--park-budget"),
])
def test_serve_refuses_a_bad_park_budget(argv, said, capsys, monkeypatch):
    monkeypatch.delenv("PARLEY_SERVE_TOKEN", raising=False)
    assert main(["serve", "--port", "0", "--assets", str(EXAMPLES), *argv]) == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize(("flag", "expected_mib"), [([], PARK_BUDGET_MIB), (["--park-budget", "0.25"], 256.0),
                                                    (["--park-budget", "0"], 0.0)])
def test_serve_parks_within_its_park_budget_in_the_state_folder(flag, expected_mib, tmp_path):
    args = build_parser().parse_args(["serve", "--assets", str(EXAMPLES), "--kv-budget", "1", "--state-dir",
                                      str(tmp_path), *flag])
    backend = _backend(args, EXAMPLES)
    try:
        assert backend.kv_stats().park_budget_mib == expected_mib
        backend.store_parked(parked("npc-a/reply", 1))
        backend.store_parked(parked("npc-b/reply", 2))
        spilled = files(tmp_path / "parked")
        assert len(spilled) == (2 if expected_mib == 0 else 0)
    finally:
        backend.close()
    assert list((tmp_path / "parked").glob("*")) == []
