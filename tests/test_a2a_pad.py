"""Padded equal-split all-to-all: S_PAD and wire cost by hand, and byte identity with the uneven
all_to_all_single under torchrun (gloo, 2 and 4 processes) and in a world of one process."""

from __future__ import annotations

import json

import pytest
from conftest import run_script, torchrun
from ditpar.comm import padded_alltoall
from ditpar.errors import InputError


def test_s_pad_is_the_next_multiple_of_128():
    assert [padded_alltoall.s_pad_for(v) for v in (0, 1, 127, 128, 129, 300)] == [0, 128, 128, 128, 256, 384]
    assert padded_alltoall.s_pad_for(300, multiple=1) == 300
    with pytest.raises(InputError):
        padded_alltoall.s_pad_for(-1)
    with pytest.raises(InputError):
        padded_alltoall.round_up(5, 0)


def test_plan_by_hand():
    # blocks 300, 0, 17, 129 rows; S_PAD = 384; wire = 2 ranks x 2 blocks x 384 rows x 6144 B
    plan = padded_alltoall.pad_plan([[300, 0], [17, 129]], row_bytes=6144)
    assert plan["s_pad"] == 384
    assert plan["payload_bytes"] == (300 + 0 + 17 + 129) * 6144 == 2740224
    assert plan["wire_bytes"] == 2 * 2 * 384 * 6144 == 9437184
    assert plan["padding_overhead"] == pytest.approx(9437184 / 2740224 - 1)
    assert [r["recv_rows"] for r in plan["per_rank"]] == [317, 129]
    assert padded_alltoall.pad_plan([[0]], 10)["padding_overhead"] is None  # nothing to move: no ratio


@pytest.mark.parametrize("text", ["1,2;3", "a,b;c,d", "1,-1;2,2", ""])
def test_split_matrix_rejects(text):
    with pytest.raises(InputError):
        padded_alltoall.parse_split_matrix(text)


def test_plan_cli_json():
    proc = run_script("a2a_pad.py", "--splits", "300,0;17,129", "--row-bytes", "6144", "--json", check=0)
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "dit-parallel-opt/a2a_pad/v1"
    assert (doc["s_pad"], doc["wire_bytes"]) == (384, 9437184)


@pytest.mark.parametrize("args,needle", [
    (["--splits", "1,2;3"], "--splits row 1"),
    (["--splits", "1,2;3,4"], "--row-bytes"),
    (["--check", "--splits", "1,2;3,4"], "launched world has 1 rank"),
    (["--check", "--world-size", "2"], "launched world has 1 rank"),
])
def test_bad_input_exits_2(args, needle):
    proc = run_script("a2a_pad.py", *args, check=2)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], proc.stderr


def check_doc(doc: dict, world: int) -> None:
    assert doc["mode"] == "check" and doc["world"] == world and doc["backend"] == "gloo"
    assert doc["identical"] is True
    cases = doc["cases"]
    assert all(c["identical"] and c["matches_expected"] for c in cases)
    assert all(c["s_pad"] % 128 == 0 and c["s_pad"] >= c["max_block_rows"] for c in cases)
    if world > 1:  # some blocks empty while others carry data
        assert any(c["empty_blocks"] > 0 and c["payload_bytes"] > 0 for c in cases)
    assert any(c["payload_bytes"] == 0 for c in cases)  # and the all-empty exchange
    assert {c["s_pad_from"] for c in cases} == {"static", "all_reduce"}
    assert {c["dtype"] for c in cases} >= {"float32", "bfloat16", "int8"}


def test_single_rank_identical():
    proc = run_script("a2a_pad.py", "--check", "--trials", "4", "--json", check=0)
    check_doc(json.loads(proc.stdout), 1)


@pytest.mark.parametrize("nproc", [2, 4])
def test_torchrun_identical(nproc):
    proc = torchrun(nproc, "a2a_pad.py", "--check", "--trials", "8", "--seed", str(nproc), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    check_doc(doc, nproc)
    assert len(doc["cases"]) == 5 + 8  # the special matrices plus the random ones


# --- issue 14 item 9: --dtype and --row-shape for the one-case check and the plan ---------------------------

@pytest.mark.parametrize("dtype,torch_name,item", [("bf16", "bfloat16", 2), ("fp16", "float16", 2),
                                                   ("fp32", "float32", 4)])
def test_torchrun_splits_with_dtype_and_row_shape(dtype, torch_name, item):
    # Ulysses-like rows of 40 heads x 128: blocks 300, 0 / 17, 129 rows under gloo, 2 processes
    proc = torchrun(2, "a2a_pad.py", "--check", "--splits", "300,0;17,129", "--dtype", dtype,
                    "--row-shape", "40,128", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    (case,) = doc["cases"]
    assert case["dtype"] == torch_name and case["row_shape"] == [40, 128]
    assert case["identical"] and case["matches_expected"]
    # by hand: 446 rows of 40 x 128 elements; S_PAD 384 -> wire 2 x 2 x 384 rows
    assert case["payload_bytes"] == 446 * 40 * 128 * item
    assert case["wire_bytes"] == 4 * 384 * 40 * 128 * item


def test_single_rank_random_cases_keep_the_given_dtype():
    doc = json.loads(run_script("a2a_pad.py", "--check", "--trials", "3", "--dtype", "fp16", "--row-shape", "7",
                                "--json", check=0).stdout)
    assert {c["dtype"] for c in doc["cases"]} == {"float16"} and {tuple(c["row_shape"]) for c in doc["cases"]} == {(7,)}
    assert doc["identical"]


def test_plan_row_bytes_from_dtype_and_row_shape():
    doc = json.loads(run_script("a2a_pad.py", "--splits", "300,0;17,129", "--dtype", "bf16", "--row-shape", "24,128",
                                "--json", check=0).stdout)
    assert doc["row_bytes"] == 2 * 24 * 128 == 6144 and doc["wire_bytes"] == 9437184  # as test_plan_by_hand
    for bad in (["--dtype", "fp8"], ["--row-shape", "0,128"], ["--row-shape", "a"]):
        proc = run_script("a2a_pad.py", "--splits", "1,2;3,4", *bad, check=2)
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
