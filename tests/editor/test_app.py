"""parley-studio's command line refuses bad values with a message and exit status 2 (issue 14,
defect 17: `--size abc` raised ValueError after the window was built)."""

from __future__ import annotations

import pytest

from editor.app import build_parser, main


@pytest.mark.parametrize("size", ["abc", "1500", "1500x", "x900", "0x900", "1500x0", "-5x10", "99999x900", "1.5x2"])
def test_a_bad_size_is_a_message_and_exit_2(size, capsys):
    with pytest.raises(SystemExit) as info:
        main(["--screenshot", "out.png", f"--size={size}"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --size" in err and repr(size) in err and "Traceback" not in err


@pytest.mark.parametrize(("size", "expected"), [("800x600", (800, 600)), ("1600X1000", (1600, 1000)),
                                                (" 640 x 480 ", (640, 480))])
def test_good_sizes(size, expected):
    assert build_parser().parse_args(["--size", size]).size == expected


def test_the_default_size():
    assert build_parser().parse_args([]).size == (1500, 900)
