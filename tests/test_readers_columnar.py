"""The columnar kernel_details.csv reader: the same events as a plain pandas read, and clean errors."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, need_shared
from ditpar.core.classify import classify_ascend
from ditpar.errors import InputError
from ditpar.readers.ascend import text as ascend
from ditpar.timeparse import us_to_ns

RANK0 = ROOT / "tests" / "data" / "ascend_cann83" / "node0_23101_20251127201437501_ascend_pt"


def reference_events(csv_path):
    """The columns the reader produces, computed the slow way: pandas C engine, per-cell objects."""
    frame = pd.read_csv(csv_path, dtype=str, keep_default_na=False)
    frame.columns = [c.strip().lstrip("\ufeff") for c in frame.columns]
    names = frame["Name"].str.strip()
    types = frame["Type"].str.strip() if "Type" in frame else pd.Series([""] * len(frame))
    cores = frame["Accelerator Core"].str.strip()
    decided = classify_ascend(names, types, cores)
    return {"start_ns": us_to_ns(frame["Start Time(us)"]), "dur_ns": us_to_ns(frame["Duration(us)"]),
            "name": names.tolist(), "kind": list(decided.kind), "family": list(decided.family),
            "group": list(decided.group), "step": [None if s in ("", "N/A") else int(s) for s in frame["Step Id"]]}


@pytest.mark.parametrize("where", ["shipped", "level0", "level1"])
def test_columnar_read_equals_pandas_read(where):
    if where == "shipped":
        folder = RANK0
    else:
        folder = need_shared("fixtures", "ascend", f"msinsight-text-{where}", "rank0_ascend_pt")
    rank = ascend.read_rank(folder)
    ref = reference_events(folder / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv")
    ev = rank.events
    assert len(ev) == len(ref["start_ns"])
    kd = ev.sort_values("start_ns", kind="stable")
    order = np.argsort(ref["start_ns"], kind="stable")
    assert kd["start_ns"].tolist() == ref["start_ns"][order].tolist()
    assert kd["dur_ns"].tolist() == ref["dur_ns"][order].tolist()
    assert sorted(kd["name"]) == sorted(ref["name"])
    assert sorted(zip(kd["kind"], kd["family"], kd["group"], strict=True)) == sorted(
        zip(ref["kind"], ref["family"], ref["group"], strict=True))


def copy_rank(tmp_path):
    dst = tmp_path / RANK0.name
    shutil.copytree(RANK0, dst)
    return dst, dst / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"


def test_duplicated_needed_column_is_an_input_error(tmp_path):
    dst, csv_path = copy_rank(tmp_path)
    lines = csv_path.read_text(encoding="utf-8").splitlines()
    lines = [line + (",Name" if i == 0 else ",x") for i, line in enumerate(lines)]
    csv_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"\['Name'\] appear more than once"):
        ascend.read_rank(dst)


def test_short_row_is_an_input_error_naming_the_file(tmp_path):
    dst, csv_path = copy_rank(tmp_path)
    lines = csv_path.read_text(encoding="utf-8").splitlines()
    lines[3] = ",".join(lines[3].split(",")[:3])
    csv_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"kernel_details\.csv: cannot parse as CSV"):
        ascend.read_rank(dst)


def test_bad_start_time_names_line_and_column(tmp_path):
    dst, csv_path = copy_rank(tmp_path)
    text = csv_path.read_text(encoding="utf-8").splitlines()
    header = text[0].split(",")
    i = header.index("Start Time(us)")
    cells = text[2].split(",")
    cells[i] = "12:30"
    text[2] = ",".join(cells)
    csv_path.write_text("\n".join(text) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"column 'Start Time\(us\)': line 3: expected a decimal time.*'12:30'"):
        ascend.read_rank(dst)
