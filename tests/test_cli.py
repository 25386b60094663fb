"""cli.run: every failure ends in one line on stderr and the documented exit code."""

from __future__ import annotations

import re

import pytest
from ditpar import cli
from ditpar.errors import InputError


def _exit(body, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as ex:
        cli.run("tool.py", body)
    return ex.value.code, capsys.readouterr().err


def test_input_error_is_one_line_exit_2(capsys):
    def body():
        raise InputError("a.csv: row 3:\n  column 'x' missing")
    code, err = _exit(body, capsys)
    assert code == 2 and err == "tool.py: error: a.csv: row 3: column 'x' missing\n"


def test_missing_package_names_it_and_the_install_step(capsys):
    def body():
        raise ModuleNotFoundError("No module named 'pandas.core'", name="pandas.core")
    code, err = _exit(body, capsys)
    assert code == 2 and err.count("\n") == 1
    assert "'pandas'" in err and "pip install -e ." in err

    def torch_body():
        raise ModuleNotFoundError("No module named 'torch'", name="torch")
    code, err = _exit(torch_body, capsys)
    assert code == 2 and 'pip install -e ".[dist]"' in err


def test_return_value_is_the_exit_code(capsys):
    assert _exit(lambda: 1, capsys)[0] == 1
    assert _exit(lambda: None, capsys)[0] == 0


class _ClosedPipe:
    """A stdout whose reader has gone away (as with `| head -1`)."""

    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self):
        raise BrokenPipeError(32, "Broken pipe")

    def fileno(self):
        raise OSError("no descriptor")


def test_broken_pipe_keeps_the_exit_code_of_a_failed_check(monkeypatch, capsys):
    def body():
        print("table that the reader will not read")
        return 1
    monkeypatch.setattr("sys.stdout", _ClosedPipe())
    with pytest.raises(SystemExit) as ex:
        cli.run("tool.py", body)
    assert ex.value.code == 1


def test_outputs_respect_the_umask(tmp_path, capsys):
    import os
    import stat
    old = os.umask(0o027)
    try:
        assert _exit(lambda: cli.write_output(tmp_path / "a.csv", "x\n"), capsys)[0] == 0
        cli.write_atomic(tmp_path / "b.csv", "x\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.csv").stat().st_mode) == 0o640
    assert stat.S_IMODE((tmp_path / "b.csv").stat().st_mode) == 0o640


def test_outputs_are_all_or_none(tmp_path, capsys):
    def body():
        cli.write_output(tmp_path / "t.csv", "a\n1\n")
        raise InputError("--plot: cannot draw")
    code, err = _exit(body, capsys)
    assert code == 2 and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []  # neither the CSV nor a temporary file

    def failed_check():
        cli.write_output(tmp_path / "t.csv", "a\n1\n")
        return 1
    assert _exit(failed_check, capsys)[0] == 1
    assert (tmp_path / "t.csv").read_text() == "a\n1\n"


def test_output_path_that_is_a_folder_is_one_line_exit_2(tmp_path, capsys):
    code, err = _exit(lambda: cli.write_output(tmp_path, "x\n"), capsys)
    assert code == 2 and err.count("\n") == 1 and "is a folder" in err


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "NaN"])
def test_float_flags_refuse_nan_and_infinity(text, capsys):
    parser = cli.make_parser("tool.py", "d", "tool.py --x 1")
    parser.add_argument_group("g").add_argument("--x", type=float)
    with pytest.raises(SystemExit) as ex:
        parser.parse_args([f"--x={text}"])
    err = capsys.readouterr().err
    assert ex.value.code == 2 and err.count("\n") == 1 and "finite" in err
    assert parser.parse_args(["--x", "1e3"]).x == 1000.0


def test_non_utf8_input_is_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "m.toml"
    bad.write_bytes(b"name = \"\xff\"\n")
    code, err = _exit(lambda: bad.read_text(encoding="utf-8"), capsys)
    assert code == 2 and err.count("\n") == 1 and "0xff" in err


def test_closed_pipe_keeps_exit_1_of_collectives():
    """`collectives.py ... --layers 7 | head -1`: the failed calls-per-layer check still exits 1."""
    import os
    import subprocess
    import sys

    from conftest import ROOT, SCRIPTS

    rank0 = ROOT / "tests/data/ascend_cann83/node0_23101_20251127201437501_ascend_pt"
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone before the first byte is written
    try:
        proc = subprocess.run([sys.executable, str(SCRIPTS / "collectives.py"), str(rank0), "--layers", "7"],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr


# --- issue 22: shared argument validators ------------------------------------------------------------

def test_int_list_type():
    import argparse

    from ditpar.cli import int_list

    parse = int_list(0, 7, "device ids")
    assert parse("0,1, 4,5") == [0, 1, 4, 5]
    for text, phrase in (("", "(none)"), (",", "(none)"), ("0,x", "integer device ids"), ("0,0", "[0] more than once"),
                         ("0,8", "[8] outside 0..7"), ("-1", "[-1] outside")):
        with pytest.raises(argparse.ArgumentTypeError, match=re.escape(phrase)):
            parse(text)


def test_distinct_action_and_partners():
    from ditpar import cli
    from ditpar.errors import InputError

    p = cli.make_parser("t", "d", "t --compare a b")
    p.add_argument("--compare", nargs="+", action=cli.distinct(lambda s: s.lower()))
    p.add_argument("--cards", type=int, nargs=2)
    p.add_argument("--linearity", action="store_true")
    assert p.parse_args(["--compare", "a", "b"]).compare == ["a", "b"]
    with pytest.raises(SystemExit) as exc:
        p.parse_args(["--compare", "a", "A"])
    assert exc.value.code == 2
    cli.require_partners(p.parse_args(["--cards", "4", "8", "--linearity"]), {"--cards": "--linearity"})
    cli.require_partners(p.parse_args([]), {"--cards": "--linearity"})
    with pytest.raises(InputError, match="--cards is only used with --linearity"):
        cli.require_partners(p.parse_args(["--cards", "4", "8"]), {"--cards": "--linearity"})


def test_name_list_type():
    import argparse

    from ditpar.cli import name_list

    parse = name_list("families")
    assert parse(" alltoall, allgather ") == ["alltoall", "allgather"]
    for text, phrase in (("", "(none)"), (",,", "(none)"), ("a,b,a", "['a'] more than once")):
        with pytest.raises(argparse.ArgumentTypeError, match=re.escape(phrase)):
            parse(text)


def test_nonempty_type():
    import argparse

    from ditpar.cli import nonempty

    assert nonempty("a pattern")("Flash.*") == "Flash.*"
    with pytest.raises(argparse.ArgumentTypeError, match="expected a pattern, got ' '"):
        nonempty("a pattern")(" ")
