"""The streaming trace reader against json.loads, with buffers cut at every possible place."""

from __future__ import annotations

import json

import pytest
from ditpar.errors import InputError
from ditpar.readers import jsonstream

TRACE = ('{"schemaVersion": 1, "traceEvents": [ {"ph": "X", "ts": 1712345678901234.567, "name": "a}b,c]"},'
         '\n  7, "x", {"ph": "i", "args": {"k": [1, 2, {"z": "]"}]}, "ts": 12.5} ,{"e": -1.25e3}\t],'
         ' "baseTimeNanoseconds": 1700000000000000000}')


def _events(text: str, tmp_path, chunk: int, monkeypatch) -> tuple[list, dict]:
    path = tmp_path / "t.json"
    path.write_text(text, encoding="utf-8")
    monkeypatch.setattr(jsonstream, "_CHUNK", chunk)
    other: dict = {}
    got = list(jsonstream.iter_trace(path, lambda k, v: other.__setitem__(k, v)))
    return got, other


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 8, 13, 64, 1 << 22])
def test_same_events_as_json_loads_at_any_chunk_size(tmp_path, monkeypatch, chunk):
    expected = json.loads(TRACE, parse_float=str)
    got, other = _events(TRACE, tmp_path, chunk, monkeypatch)
    assert got == [e for e in expected["traceEvents"] if isinstance(e, dict)]
    assert got[0]["ts"] == "1712345678901234.567"        # float text kept exactly
    assert other == {"schemaVersion": 1, "baseTimeNanoseconds": 1700000000000000000}


@pytest.mark.parametrize("chunk", [1, 4, 1 << 22])
@pytest.mark.parametrize("broken, fragment", [
    ('{"traceEvents": [{"a": 1} {"b": 2}]}', "expected ',' or ']' between events"),
    ('{"traceEvents": [{"a": 1}, {"b": 2}', "file ends early"),
    ('{"traceEvents": [{"a": 1},, {"b": 2}]}', "invalid JSON"),
    ('{"traceEvents": [{"a": 1}]} tail', "unexpected text after the JSON document"),
])
def test_broken_traces_are_one_input_error(tmp_path, monkeypatch, chunk, broken, fragment):
    with pytest.raises(InputError, match=fragment):
        _events(broken, tmp_path, chunk, monkeypatch)
