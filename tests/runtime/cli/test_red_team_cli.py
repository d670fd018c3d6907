"""``parley test SUITE --red-team`` on the scripted backend (it echoes the player's line): the tables,
the exit codes, the reports, the saved attacks and bundles, and bad input named where it is."""

from __future__ import annotations

import json

from runtime.asset.file import save_asset
from runtime.cli import main
from runtime.suites.file import load_suite
from tests.runtime.conversations import asset

SUITE = """asset: npc.json
red_team:
  families: [secret_leak, break_character]
  attempts: 6
  secrets: [instructions]
"""


def _npc(tmp_path, bypassed: bool, suite: str = SUITE):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF, for the hash only")
    graph = asset(("Guard", "gate", {"policies": [{"name": "probe", "packs": ["secret_probe"], "reply": "No."}],
                                     "default_exit": "answer", "bypassed": bypassed}),
                  ("GenerateAndSpeak", "answer", {"context_size": 512, "max_tokens": 16}))
    save_asset(graph.model_copy(update={"default_model": model.name}), tmp_path / "npc.json")
    path = tmp_path / "npc.suite.yaml"
    path.write_text(suite, encoding="utf-8")
    return path


def test_an_open_npc_fails_the_run_and_its_attacks_are_kept(tmp_path, capsys):
    suite = _npc(tmp_path, bypassed=True)
    code = main(["test", str(suite), "--red-team", "--backend", "scripted", "--json", str(tmp_path / "r.json"),
                 "--report", str(tmp_path / "r.html"), "--save-attacks", str(tmp_path / "attacks.suite.yaml"),
                 "--bundles", str(tmp_path / "bundles"), "--benign", str(_benign(tmp_path))])
    out, err = capsys.readouterr()
    assert code == 1, out + err
    assert "red team on npc.suite.yaml: npc.json: 12 attacks" in out
    assert "  got through: secret_leak #" in out and "(secret:instructions): " in out
    leak = next(line for line in out.splitlines() if line.strip().startswith("secret_leak"))
    assert "FAIL" in leak and "%" in leak and "[" in leak
    assert "benign lines: no guard checks the player's line" in out
    assert "guard latency p50/p95: n/a/n/a over 0 runs" in out
    assert "over the threshold: family secret_leak: attack success" in err
    data = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))["red_team"][0]
    assert data["passed"] is False and data["families"][0]["name"] == "secret_leak"
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert 'id="red-team"' in page and 'id="parley-attack-0"' in page and "secret_leak" in page
    assert "No benign line was run: no guard checks the player's line." in page
    saved = load_suite(tmp_path / "attacks.suite.yaml")
    assert saved.suite.cases and all(c.turns[0].expect.reply.not_contains == ["instructions"]
                                     for c in saved.suite.cases)
    bundles = sorted(p.name for p in (tmp_path / "bundles").iterdir())
    assert bundles and all(name.startswith("secret_leak-") for name in bundles)
    # The saved cases fail while the attack works
    assert main(["test", str(tmp_path / "attacks.suite.yaml"), "--backend", "scripted"]) == 1


def _benign(tmp_path):
    path = tmp_path / "benign.txt"
    path.write_text("# two lines\nHello there!\nWhat do you sell?\n", encoding="utf-8")
    return path


def test_a_guarded_npc_passes(tmp_path, capsys):
    suite = _npc(tmp_path, bypassed=False, suite=SUITE.replace("break_character", "narration")
                 .replace("[instructions]", "[silverfern]"))
    assert main(["test", str(suite), "--red-team", "--backend", "scripted", "--benign", str(_benign(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "benign lines flagged: 0/2" in out and "guard latency p50/p95: " in out and "(patterns " in out


def test_bad_input_is_named_and_exits_2(tmp_path, capsys):
    suite = _npc(tmp_path, bypassed=True, suite=SUITE + "  colour: red\n")
    assert main(["test", str(suite), "--red-team", "--backend", "scripted"]) == 2
    assert f"{suite}:6:11: error: red_team.colour: " in capsys.readouterr().err

    suite = _npc(tmp_path, bypassed=True)
    pack = tmp_path / "mine.yaml"
    pack.write_text("version: 1\nfamilies:\n  - name: mine\n    title: T\n    goal: secret\n    lines: []\n",
                    encoding="utf-8")
    assert main(["test", str(suite), "--red-team", "--backend", "scripted", "--attacks", str(pack)]) == 2
    assert f"{pack}:6:12: error: family 'mine', families.0.lines: " in capsys.readouterr().err

    assert main(["test", str(suite), "--red-team", "--backend", "scripted", "--families", "nope"]) == 2
    assert "no attack family 'nope'" in capsys.readouterr().err
    assert main(["test", str(suite), "--attempts", "3", "--backend", "scripted"]) == 2
    assert "--attempts: give them with --red-team" in capsys.readouterr().err
    assert main(["test", str(suite), "--red-team", "--backend", "scripted", "--benign", str(tmp_path / "no.txt")]) == 2
    assert "no.txt" in capsys.readouterr().err

    missing = _npc(tmp_path, bypassed=True, suite=SUITE + "  packs: [gone.yaml]\n")
    assert main(["test", str(missing), "--red-team", "--backend", "scripted"]) == 2
    assert f"{missing}:6:11: error: red_team.packs.0: no attack pack gone.yaml" in capsys.readouterr().err
