"""communication.json read op by op (comm_json): the values the whole parse gives, the same rows, and the
whole parse again for any file not in the plain shape (it names what is wrong)."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT
from ditpar.errors import InputError
from ditpar.readers.ascend import comm_json
from ditpar.readers.ascend import text as ascend

RANK0 = sorted((ROOT / "tests" / "data" / "ascend_cann83").glob("*_ascend_pt"))[0]
COMM = RANK0 / "ASCEND_PROFILER_OUTPUT" / "communication.json"
FIELDS = ("Start Timestamp(us)", *ascend._TIME_FIELDS.values())


def _whole(monkeypatch) -> None:
    """Force the whole-file parse (the reference)."""
    def refuse(text):
        raise comm_json.NotPlain

    monkeypatch.setattr(comm_json, "raw_ops", refuse)


def test_values_are_what_the_whole_parse_gives():
    """Integers stay ints, numbers with a fraction or an exponent stay their text, strings and null as JSON."""
    text = json.dumps({"step1": {"collective": {"hcom_x__1_0@9": {
        "Communication Time Info": {"Start Timestamp(us)": 0, "Elapse Time(ms)": 1, "Wait Time(ms)": "2.5",
                                    "Idle Time(ms)": None, "Other": [1, 2]},
        "Communication Bandwidth Info": {"HCCS": {"Transit Size(MB)": 3, "Size Distribution": {"1": [2, 3]}},
                                         "SDMA": {"Transit Size(MB)": 9}}}}}})
    text = text.replace('"Start Timestamp(us)": 0', '"Start Timestamp(us)": 1736410576404465.403')
    text = text.replace('"Elapse Time(ms)": 1', '"Elapse Time(ms)": 1.5e-3')
    ops = comm_json.raw_ops(text)
    op = comm_json.prune(ops["step1"]["collective"]["hcom_x__1_0@9"], FIELDS, ascend._TRANSPORTS, "Transit Size(MB)")
    whole = json.loads(text, parse_float=str)["step1"]["collective"]["hcom_x__1_0@9"]
    assert op == {"Communication Time Info": {"Start Timestamp(us)": "1736410576404465.403",
                                              "Elapse Time(ms)": "1.5e-3", "Wait Time(ms)": "2.5",
                                              "Idle Time(ms)": None},
                  "Communication Bandwidth Info": {"HCCS": {"Transit Size(MB)": 3}}}
    for key, value in op["Communication Time Info"].items():
        assert whole["Communication Time Info"][key] == value


def test_the_shipped_rank_gives_the_rows_of_the_whole_parse(monkeypatch):
    fast, fast_hashes = ascend._read_communication(COMM)
    _whole(monkeypatch)
    slow, slow_hashes = ascend._read_communication(COMM)
    assert len(fast) > 0 and fast.equals(slow) and fast_hashes == slow_hashes


@pytest.mark.parametrize("damage", ["bandwidth list", "transport list", "nan literal"])
def test_a_file_off_the_plain_shape_is_parsed_whole(tmp_path, monkeypatch, damage):
    """A bandwidth block that is not an object (the whole parse ignores it) and a NaN literal (JSON
    extension the whole parse accepts, then names as not a finite time) give what the whole parse gives."""
    data = json.loads(COMM.read_text())
    step = next(iter(data))
    kind = next(iter(data[step]))
    key = next(k for k in data[step][kind] if k != "Total Op Info")
    op = data[step][kind][key]
    if damage == "bandwidth list":
        op["Communication Bandwidth Info"] = [1, 2]
    elif damage == "transport list":
        op["Communication Bandwidth Info"] = {"HCCS": [1, 2]}
    text = json.dumps(data)
    if damage == "nan literal":
        text = text.replace('"Elapse Time(ms)": ', '"Elapse Time(ms)": NaN, "x": ', 1)
    path = tmp_path / "communication.json"
    path.write_text(text)
    with pytest.raises(comm_json.NotPlain):
        ops = comm_json.raw_ops(text)
        for kinds in ops.values():
            for entries in kinds.values():
                for raw in entries.values():
                    comm_json.prune(raw, FIELDS, ascend._TRANSPORTS, "Transit Size(MB)")
    if damage == "nan literal":
        with pytest.raises(InputError, match="Elapse Time\\(ms\\): expected a finite time >= 0 ms, got nan"):
            ascend._read_communication(path)
        return
    got, _ = ascend._read_communication(path)
    _whole(monkeypatch)
    want, _ = ascend._read_communication(path)
    assert got.equals(want)
    assert got.loc[got["name"] == key.partition("@")[0], "bytes"].isna().all()
