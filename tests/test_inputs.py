"""ditpar.files (input side), ditpar.limits and cli.run's last line of defence (issue 22): every input
problem is one line naming the file and the real cause; FIFOs are read once, never waited on for ever."""

from __future__ import annotations

import json
import os
import sys
import threading

import pytest
from ditpar import cli, files, limits
from ditpar.errors import InputError


def _exit(body, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as ex:
        cli.run("tool.py", body)
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return ex.value.code, err


@pytest.fixture(autouse=True)
def _forget():
    yield
    files.reset()


def test_input_problems_name_the_cause(tmp_path):
    os.symlink(tmp_path / "nowhere.csv", tmp_path / "dangling.csv")
    os.symlink("loop.csv", tmp_path / "loop.csv")
    os.mkfifo(tmp_path / "f.fifo")
    (tmp_path / "d").mkdir()
    (tmp_path / "ok.csv").write_text("a\n")
    assert "nowhere.csv, which does not exist" in files.input_problem(tmp_path / "dangling.csv")
    assert "loop" in files.input_problem(tmp_path / "loop.csv")
    assert "is a FIFO, not a regular file" in files.input_problem(tmp_path / "f.fifo")
    assert files.input_problem(tmp_path / "f.fifo", streams=True) is None
    assert "is a folder; expected a file" in files.input_problem(tmp_path / "d")
    assert "is a file; expected a folder" in files.input_problem(tmp_path / "ok.csv", "folder")
    assert "no such file or folder" in files.input_problem(tmp_path / "absent.csv")
    assert files.input_problem(tmp_path / "ok.csv") is None


def test_text_inputs_drop_a_bom_name_utf16_and_strip_colour(tmp_path):
    p = tmp_path / "t.txt"
    p.write_bytes(b"\xef\xbb\xbfop,bytes\n")
    assert files.read_input_text(p) == "op,bytes\n"
    p.write_bytes("op,bytes\n".encode("utf-16"))
    with pytest.raises(InputError, match="t.txt: is UTF-16 text"):
        files.read_input_text(p)
    p.write_bytes("op,bytes\n".encode("utf-16-le"))  # no byte-order mark: still named
    with pytest.raises(InputError, match="UTF-16"):
        files.read_input_text(p)
    p.write_bytes(b"caf\xe9\n")
    with pytest.raises(InputError, match=r"t.txt: is not UTF-8 text \(byte 0xe9 at offset 3\)"):
        files.read_input_text(p)
    p.write_text("\x1b[1;32mGPU0\x1b[0m\tGPU1\n")
    assert files.read_input_text(p, strip_ansi=True) == "GPU0\tGPU1\n"


def test_a_fifo_is_read_once_whole_and_one_without_writer_is_an_error(tmp_path, monkeypatch):
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    payload = b"x" * 300_000  # more than a pipe buffer: read to the end, not one chunk

    def writer():
        with open(fifo, "wb") as fh:
            fh.write(payload)
    t = threading.Thread(target=writer)
    t.start()
    assert files.read_input(fifo) == payload
    t.join(10)
    monkeypatch.setattr(files, "FIFO_WAIT_S", 0.2)
    with pytest.raises(InputError, match="no writer opened this FIFO within 0.2 s"):
        files.read_input(fifo)


def test_process_substitution_is_read(tmp_path):
    """`topo.py <(cat TOPO)`: the shell hands over /dev/fd/N, a pipe."""
    import subprocess

    from conftest import ROOT
    topo = ROOT / "tests" / "data" / "topo" / "nvidia_h100_nv18.txt"
    proc = subprocess.run(["bash", "-c", f'"{sys.executable}" scripts/topo.py <(cat "{topo}") --json'], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["format"] == "nvidia-smi" and doc["devices"] == list(range(8))


@pytest.mark.parametrize("value, message", [
    (99999999999999999999999, "out of range; expected an integer 0..1048575"),
    (1e30, "out of range"), ("3;4", "expected an integer"), (2.5, "expected an integer"), (True, "expected"),
    (float("nan"), "expected an integer"), (None, "expected"),
])
def test_integer_fields_are_checked_with_their_range(value, message):
    with pytest.raises(InputError, match=message) as ex:
        limits.integer(value, "f.json: rank_id", 0, limits.MAX_RANK_ID)
    assert str(ex.value).startswith("f.json: rank_id: ")


def test_number_fields():
    assert limits.integer("7", "w", 0, 9) == 7 and limits.integer(4.0, "w", 0, 9) == 4
    assert limits.number("14", "w", 0, 100, lo_open=True) == 14.0
    for bad, msg in (("14B", "expected a finite number in \\(0, 100\\]"), (0, "out of range"),
                     (float("inf"), "finite"), ("nan", "finite")):
        with pytest.raises(InputError, match=msg):
            limits.number(bad, "m.toml: key 'params_b'", 0, 100, lo_open=True)


def test_os_errors_that_escape_are_one_line_naming_the_file(capsys):
    def denied():
        raise PermissionError(13, "Permission denied", "/data/prof/ASCEND_PROFILER_OUTPUT")
    code, err = _exit(denied, capsys)
    assert code == 2 and "/data/prof/ASCEND_PROFILER_OUTPUT: permission denied" in err

    def folder():
        raise IsADirectoryError(21, "Is a directory", "/runs/scope-rank0.jsonl")
    code, err = _exit(folder, capsys)
    assert code == 2 and "/runs/scope-rank0.jsonl: is a folder; expected a file" in err


def test_permission_denied_on_a_profile_is_one_line(monkeypatch, capsys):
    """Root reads everything, so the denial is simulated where the reader opens the kernel table."""
    from conftest import ROOT
    from ditpar.readers import load_profiles
    from ditpar.readers.ascend import text as ascend

    rank0 = ROOT / "tests/data/ascend_cann83/node0_23101_20251127201437501_ascend_pt"

    def deny(path):
        raise PermissionError(13, "Permission denied", str(path))
    monkeypatch.setattr(ascend, "_read_kernel_details", deny)
    code, err = _exit(lambda: load_profiles([rank0], workers=1), capsys)
    assert code == 2 and "kernel_details.csv: permission denied" in err


def test_non_utf8_without_a_file_name_is_named_from_the_reader(tmp_path, capsys):
    bad = tmp_path / "table.csv"
    bad.write_bytes(b"a,b\n\xff\xfe\n")

    def reader(path=str(bad)):
        cli.register_input(path)  # as the parser does for every path argument
        with open(path, "rb") as fh:
            return fh.read().decode("utf-8")  # the error carries no file name
    code, err = _exit(reader, capsys)
    assert code == 2 and f"{bad}: input is not UTF-8 text (byte 0xff" in err


@pytest.mark.parametrize("value", ["-5", "-5e2", "-.5", "-1E-3"])
def test_negative_numbers_parse_as_values(value):
    parser = cli.make_parser("tool.py", "d", "tool.py --x 1")
    parser.add_argument("--x", type=float)
    assert parser.parse_args(["--x", value]).x == float(value)


def test_negative_infinity_is_refused_as_not_finite(capsys):
    parser = cli.make_parser("tool.py", "d", "tool.py --x 1")
    parser.add_argument("--x", type=float)
    with pytest.raises(SystemExit):
        parser.parse_args(["--x", "-inf"])
    assert "finite" in capsys.readouterr().err


def test_a_subfolder_the_user_may_not_list_is_named_not_skipped(tmp_path, monkeypatch):
    """Root lists everything, so the denial is simulated where os.walk reports it."""
    import ditpar.readers as readers

    (tmp_path / "rank0.pt.trace.json").write_text("{}")
    real_walk = os.walk

    def walk(top, onerror=None, **kw):
        if onerror is not None:
            onerror(PermissionError(13, "Permission denied", str(tmp_path / "rank1")))
        yield from real_walk(top, **kw)
    monkeypatch.setattr(readers.load.os, "walk", walk)
    with pytest.raises(InputError, match="rank1: permission denied"):
        readers.discover(tmp_path)
