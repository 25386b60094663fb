"""ditpar.outputs: the one output writer (issue 22). An output never replaces an input, a link or a
stream; two outputs never share a file; an empty name is refused; nothing is written unless the run
succeeds; a figure is drawn in the format its name says."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
from conftest import ROOT, SCRIPTS, run_script
from ditpar import cli, files
from ditpar.errors import InputError

TOPO = ROOT / "tests" / "data" / "topo" / "nvidia_h100_nv18.txt"


def _parser():
    p = cli.make_parser("tool.py", "d", "tool.py IN --csv OUT")
    p.add_argument("inputs", nargs="+")
    p.add_argument("--other", type=cli.output_path)
    cli.add_output_args(p, csv=True, plot=True)
    return p


def _refused(argv, capsys) -> str:
    with pytest.raises(SystemExit) as ex:
        _parser().parse_args(argv)
    err = capsys.readouterr().err
    assert ex.value.code == 2 and err.count("\n") == 1, err
    return err


def _run(body, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as ex:
        cli.run("tool.py", body)
    return ex.value.code, capsys.readouterr().err


@pytest.fixture
def data(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.csv").write_text("a\n1\n")
    (tmp_path / "prof" / "OUT").mkdir(parents=True)
    (tmp_path / "prof" / "OUT" / "kd.csv").write_text("k\n2\n")
    yield tmp_path
    files.reset()


@pytest.mark.parametrize("spelling", ["in.csv", "./in.csv", "sub/../in.csv", "{abs}", "link.csv", "hard.csv"])
def test_an_output_naming_an_input_is_refused(data, capsys, spelling):
    (data / "sub").mkdir()
    os.symlink(data / "in.csv", data / "link.csv")
    os.link(data / "in.csv", data / "hard.csv")
    out = spelling.replace("{abs}", str(data / "in.csv"))
    err = _refused(["in.csv", "--csv", out], capsys)
    assert "input of this run" in err or "symbolic link" in err
    assert (data / "in.csv").read_text() == "a\n1\n"
    assert os.path.islink(data / "link.csv")


def test_an_output_inside_an_input_folder_is_refused_also_by_hard_link(data, capsys):
    err = _refused(["prof", "--csv", "prof/OUT/kd.csv"], capsys)
    assert "inside the input folder prof" in err
    os.link(data / "prof" / "OUT" / "kd.csv", data / "kd-link.csv")
    err = _refused(["prof", "--csv", "kd-link.csv"], capsys)
    assert "hard link to" in err and "kd.csv" in err
    assert (data / "prof" / "OUT" / "kd.csv").read_text() == "k\n2\n"


def test_inputs_registered_by_a_reader_are_protected_at_write_time(data, capsys):
    def body():
        cli.register_input(data / "prof" / "OUT" / "kd.csv")
        cli.write_output(data / "prof" / "OUT" / "kd.csv", "result\n")
    code, err = _run(body, capsys)
    assert code == 2 and "input of this run" in err
    assert (data / "prof" / "OUT" / "kd.csv").read_text() == "k\n2\n"


def test_empty_output_name_is_refused(data, capsys):
    assert "empty name" in _refused(["in.csv", "--csv", ""], capsys)
    code, err = _run(lambda: cli.write_output("", "x\n"), capsys)
    assert code == 2 and "empty" in err


def test_two_outputs_naming_one_file_are_refused(data, capsys):
    err = _refused(["in.csv", "--csv", "m.csv", "--other", "./m.csv"], capsys)
    assert "--csv and --other name the same file" in err or "--other and --csv" in err

    def body():
        cli.write_output("m.csv", "one\n")
        cli.write_output(data / "m.csv", "two\n")
    code, err = _run(body, capsys)
    assert code == 2 and "named for two outputs" in err and not (data / "m.csv").exists()


def test_a_symbolic_link_is_never_replaced_nor_written_through_to_a_file(data, capsys):
    (data / "target.csv").write_text("keep\n")
    os.symlink(data / "target.csv", data / "link.csv")
    os.symlink(data / "nowhere.csv", data / "dangling.csv")
    os.symlink("loop.csv", data / "loop.csv")
    for name, phrase in (("link.csv", "symbolic link to"), ("dangling.csv", "does not exist"),
                         ("loop.csv", "loop")):
        err = _refused(["in.csv", "--csv", name], capsys)
        assert phrase in err, err
        code, err = _run(lambda n=name: cli.write_output(n, "x\n"), capsys)
        assert code == 2 and phrase in err
        assert os.path.islink(data / name)
    assert (data / "target.csv").read_text() == "keep\n"
    assert not (data / "nowhere.csv").exists()


def test_a_fifo_is_written_through_only_when_the_run_succeeds(data, capsys):
    fifo = data / "out.fifo"
    os.mkfifo(fifo)
    # no reader: refused at once (writing would block for ever)
    code, err = _run(lambda: cli.write_output(fifo, "x\n"), capsys)
    assert code == 2 and "no reader" in err
    for fail, expected in ((False, b"a,b\n1,2\n"), (True, b"")):
        got: list[bytes] = []
        reader = threading.Thread(target=lambda got=got: got.append(open(fifo, "rb").read()))  # noqa: SIM115
        reader.start()

        def body(fail=fail):
            while True:  # wait for the reader to open its end
                try:
                    cli.write_output(fifo, "a,b\n1,2\n")
                    break
                except InputError:
                    files._pending.clear()
            if fail:
                raise InputError("later failure")
        code, _ = _run(body, capsys)
        reader.join(10)
        assert code == (2 if fail else 0) and got == [expected]
        assert fifo.is_fifo()


def test_nothing_is_written_when_the_run_fails(data, capsys):
    (data / "old.csv").write_text("old\n")

    def body():
        cli.write_output("new.csv", "new\n")
        cli.write_output("old.csv", "replaced\n")
        raise InputError("a later input error")
    code, _ = _run(body, capsys)
    assert code == 2
    assert sorted(p.name for p in data.iterdir()) == ["in.csv", "old.csv", "prof"]
    assert (data / "old.csv").read_text() == "old\n"


def test_plot_format_follows_the_name(data, capsys):
    plt = cli.pyplot()
    fig = plt.figure()
    for name, magic in (("f.pdf", b"%PDF"), ("f.png", b"\x89PNG"), ("f.svg", b"<?xml")):
        assert _run(lambda n=name: cli.save_figure(fig, n), capsys)[0] == 0
        assert (data / name).read_bytes().startswith(magic), name
    code, err = _run(lambda: cli.save_figure(fig, "f.jpg"), capsys)
    assert code == 2 and ".png, .pdf or .svg" in err and not (data / "f.jpg").exists()
    plt.close(fig)
    assert ".png, .pdf or .svg" in _refused(["in.csv", "--plot", "f.jpeg"], capsys)


def test_dev_stdout_is_written_through_whatever_stdout_is(tmp_path):
    """`--csv /dev/stdout` to a terminal, a pipe or a redirected file: the CSV arrives, no link is touched."""
    script = [sys.executable, str(SCRIPTS / "topo.py"), str(TOPO), "--csv", "/dev/stdout"]
    piped = subprocess.run(script, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert piped.returncode == 0 and piped.stdout.startswith("size,group\n2,")
    redirected = tmp_path / "out.txt"
    with open(redirected, "w") as fh:
        proc = subprocess.run(script, stdout=fh, stderr=subprocess.PIPE, text=True, timeout=120, cwd=ROOT)
    text = redirected.read_text()
    csv_part, table = text.split("\n8,\"0,1,2,3,4,5,6,7\"\n", 1)  # the CSV whole, then the table
    assert proc.returncode == 0 and csv_part.startswith("size,group\n2,")
    assert table.startswith(f"{TOPO}: nvidia-smi matrix, 8 devices")
    assert os.path.islink("/dev/stdout")


def test_scripts_refuse_to_overwrite_their_profile(tmp_path):
    """The data-loss report of issue 22: step_breakdown P --csv P/.../kernel_details.csv."""
    import shutil

    src = ROOT / "tests/data/ascend_cann83/node0_23101_20251127201437501_ascend_pt"
    prof = tmp_path / "p"
    shutil.copytree(src, prof)
    kd = prof / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    before = kd.read_bytes()
    proc = run_script("step_breakdown.py", str(prof), "--csv", str(kd), check=2)
    assert "inside the input folder" in proc.stderr and kd.read_bytes() == before


def test_a_result_flag_without_the_output_type_is_still_checked(data, capsys):
    p = cli.make_parser("tool.py", "d", "tool.py IN --out OUT")
    p.add_argument("inputs", nargs="+")
    p.add_argument("--out")  # a future tool that forgot type=cli.output_path
    with pytest.raises(SystemExit):
        p.parse_args(["in.csv", "--out", "./in.csv"])
    assert "input of this run" in capsys.readouterr().err


def test_a_preset_file_the_run_reads_is_never_an_output(tmp_path):
    # found by name, not given on the command line: the preset loader registers what it reads
    import shutil

    from conftest import ROOT, run_script
    from ditpar.plan.inputs.presets import TEMPLATES_ENV

    tpl = tmp_path / "templates"
    shutil.copytree(ROOT / "templates", tpl)
    for victim in (tpl / "hardware" / "h100-sxm-nvlink.toml", tpl / "frameworks" / "xdit.toml"):
        before = victim.read_bytes()
        proc = run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", "H100", "--devices", "4",
                          "--csv", str(victim), check=2, env={TEMPLATES_ENV: str(tpl)})
        assert "is an input of this run" in proc.stderr and victim.read_bytes() == before


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o664])
def test_a_replaced_output_keeps_its_mode(data, capsys, mode):
    (data / "old.csv").write_text("old\n")
    os.chmod(data / "old.csv", mode)
    code, err = _run(lambda: cli.write_output("old.csv", "new\n"), capsys)
    assert code == 0, err
    assert (data / "old.csv").read_text() == "new\n"
    assert os.stat(data / "old.csv").st_mode & 0o7777 == mode


def test_a_new_output_gets_the_umask_mode(data, capsys):
    old = os.umask(0o027)
    try:
        code, err = _run(lambda: cli.write_output("fresh.csv", "x\n"), capsys)
    finally:
        os.umask(old)
    assert code == 0, err
    assert os.stat(data / "fresh.csv").st_mode & 0o7777 == 0o640


def test_a_read_only_output_is_refused_and_left_alone(data, capsys):
    (data / "locked.csv").write_text("keep\n")
    os.chmod(data / "locked.csv", 0o444)
    err = _refused(["in.csv", "--csv", "locked.csv"], capsys)
    assert "locked.csv: is read-only (mode 0444)" in err
    assert (data / "locked.csv").read_text() == "keep\n"
    assert os.stat(data / "locked.csv").st_mode & 0o7777 == 0o444


@pytest.mark.parametrize("cell, written", [
    ("=HYPERLINK(\"http://x\")", "'=HYPERLINK(\"http://x\")"), ("+cmd|' /C calc'!A0", "'+cmd|' /C calc'!A0"),
    ("-2+3", "'-2+3"), ("@SUM(A1)", "'@SUM(A1)"), ("\tx", "'\tx"), ("-1.5", "-1.5"), ("+3", "+3"),
    ("-", "-"), ("FLUX.1-dev", "FLUX.1-dev"), ("", ""),
])
def test_csv_text_cells_never_run_as_spreadsheet_formulas(cell, written, tmp_path):
    import pandas as pd

    out = tmp_path / "t.csv"
    cli.write_csv(out, pd.DataFrame({"name": [cell], "latency_s": [-1.25]}))
    back = pd.read_csv(out, dtype=str, keep_default_na=False)
    assert back["name"][0] == written and back["latency_s"][0] == "-1.25"


def test_score_out_applies_the_csv_policy_to_copied_cells(tmp_path):
    import csv

    table = tmp_path / "t.csv"
    head = ("source_repo,source_path,model,hardware,interconnect,n_devices,resolution_or_seq,steps,ulysses,ring,"
            "pipefusion,cfg,tp,other_config,latency_s,notes\n")
    row = "me,t.csv,FLUX.1-dev,H100,NVLink,{n},1024x1024,28,{n},1,1,1,1,eager,{s},{note}\n"
    table.write_text(head + row.format(n=1, s=10.0, note="=1+1") + row.format(n=2, s=5.5, note="@x"))
    out = tmp_path / "scored.csv"
    run_script("plan.py", "score", "--candidates", str(table), "--out", str(out), check=0)
    notes = [r["notes"] for r in csv.DictReader(out.open())]
    assert notes == ["'=1+1", "'@x"]
