"""The streaming trace reader's shapes, errors and typed blocks, each expected value written by hand."""

from __future__ import annotations

import gzip
import json

import pytest
from ditpar.errors import InputError
from ditpar.readers import jsonstream


def _write(tmp_path, text, name="t.json"):
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


def _read(path, chunk=None, monkeypatch=None):
    if chunk is not None:
        monkeypatch.setattr(jsonstream, "_CHUNK", chunk)
    other: dict = {}
    events = list(jsonstream.iter_trace(path, other.__setitem__))
    return events, other


@pytest.mark.parametrize("chunk", [1, 3, 1 << 22])
@pytest.mark.parametrize("text, events, other", [
    ('[{"a": 1}, 2, {"b": 2.50}]', [{"a": 1}, {"b": "2.50"}], {}),
    ("[]", [], {}),
    (" [ ] ", [], {}),
    ("{}", None, {}),
    ('{"traceEvents": []}', [], {}),
    ('{ "x" : [1] , "traceEvents" : [ {"a": 1} ] , "y": {"z": null} }', [{"a": 1}], {"x": [1], "y": {"z": None}}),
    ('{"traceEvents": [{"a": 1}], "traceEvents2": 5}', [{"a": 1}], {"traceEvents2": 5}),
    ('{"traceEvents": 5, "traceEvents": [{"a": 1}]}', [{"a": 1}], {"traceEvents": 5}),
])
def test_shapes(tmp_path, monkeypatch, chunk, text, events, other):
    path = _write(tmp_path, text)
    if events is None:
        with pytest.raises(InputError) as err:
            _read(path, chunk, monkeypatch)
        assert str(err.value) == f"{path}: JSON object without a 'traceEvents' array; expected a Chrome trace"
        return
    assert _read(path, chunk, monkeypatch) == (events, other)


def test_without_on_key_and_gzipped(tmp_path):
    path = _write(tmp_path, gzip.compress(b'{"meta": 1, "traceEvents": [{"a": 1}, {"b": 2}]}'), "t.json.gz")
    assert list(jsonstream.iter_trace(path)) == [{"a": 1}, {"b": 2}]


def _message(tmp_path, monkeypatch, text, chunk=1 << 22):
    path = _write(tmp_path, text)
    with pytest.raises(InputError) as err:
        _read(path, chunk, monkeypatch)
    return str(err.value).removeprefix(f"{path}: ")


@pytest.mark.parametrize("chunk", [2, 1 << 22])
@pytest.mark.parametrize("text, message", [
    ("x[]", "expected '[' or '{' at the start, found 'x'; expected a Chrome-trace JSON document"),
    ("", "file ends early (expected '[' or '{' at the start); the trace is truncated"),
    ("  \n", "file ends early (expected '[' or '{' at the start); the trace is truncated"),
    ('{1: 2}', "expected a member name, found '1'; expected a Chrome-trace JSON document"),
    ('{"a" 1}', "expected ':' after a member name, found '1'; expected a Chrome-trace JSON document"),
    ('{"a": 1 "b": 2}', "expected ',' or '}' between members, found '\"'; expected a Chrome-trace JSON document"),
    ('{"a": 1', "file ends early (expected ',' or '}' between members); the trace is truncated"),
    ('[{"a": 1}] x', "unexpected text after the JSON document, found 'x'; expected a Chrome-trace JSON document"),
    ('{"traceEvents": []} }', "unexpected text after the JSON document, found '}'; expected a Chrome-trace JSON "
                              "document"),
    ('[{"a": 1} {"b": 1}]', "expected ',' or ']' between events, found '{'; expected a Chrome-trace JSON document"),
    ('[{"a": 1}, {"b": ', "file ends early (invalid JSON (Expecting value)); the trace is truncated"),
    ('[{"a": 1}, {"b":', "file ends early (invalid JSON (Expecting value)); the trace is truncated"),
    ('{"traceEvents": []}}', "unexpected text after the JSON document, found '}'; expected a Chrome-trace JSON "
                             "document"),
    ('[{"a": "xy', "file ends early (invalid JSON (Unterminated string starting at)); the trace is truncated"),
])
def test_error_messages(tmp_path, monkeypatch, chunk, text, message):
    assert _message(tmp_path, monkeypatch, text, chunk) == message


def test_a_member_name_that_is_not_a_string(tmp_path, monkeypatch):
    # a JSON value that is no string where a member name goes (a number decodes: the type is what is wrong)
    assert _message(tmp_path, monkeypatch, "{12: 1}") == ("expected a member name, found '12'; expected a "
                                                          "Chrome-trace JSON document")


@pytest.mark.parametrize("chunk", [2, 5, 1 << 22])
def test_invalid_json_inside_names_the_character_of_the_file(tmp_path, monkeypatch, chunk):
    """Character 17 (from 0) is the 't' of 'tru', wherever the buffer was cut before it."""
    assert _message(tmp_path, monkeypatch, '[{"a": 1}, {"b": tru}, {"c": 3}]', chunk) == (
        "invalid JSON (Expecting value) at character 17; expected a Chrome-trace JSON document")


def test_nested_too_deeply(tmp_path, monkeypatch):
    text = "[" + "[" * 100_000 + "]" * 100_000 + "]"
    assert _message(tmp_path, monkeypatch, text) == "invalid JSON (nested too deeply); expected a Chrome-trace JSON document"


def test_an_event_over_the_size_limit_stops_the_reading(tmp_path, monkeypatch):
    monkeypatch.setattr(jsonstream, "_MAX_VALUE", 16)
    text = '[{"a": "' + "x" * 40 + '"}, {"b": 1}]'
    with pytest.raises(InputError, match="invalid JSON"):
        _read(_write(tmp_path, text), 8, monkeypatch)
    monkeypatch.setattr(jsonstream, "_MAX_VALUE", 64)
    assert _read(_write(tmp_path, text), 8, monkeypatch)[0] == [{"a": "x" * 40}, {"b": 1}]


def test_unreadable_files(tmp_path, monkeypatch):
    missing = tmp_path / "none.json"
    with pytest.raises(InputError) as err:
        list(jsonstream.iter_trace(missing))
    assert str(err.value) == f"{missing}: no such file or folder"
    bad_gz = _write(tmp_path, b"not gzip at all", "t.json.gz")
    with pytest.raises(InputError) as err:
        list(jsonstream.iter_trace(bad_gz))
    assert str(err.value).startswith(f"{bad_gz}: cannot read (BadGzipFile: ")
    bad_utf8 = _write(tmp_path, b'[{"a": "\xff"}]', "u.json")
    with pytest.raises(InputError) as err:
        list(jsonstream.iter_trace(bad_utf8))
    assert str(err.value).startswith(f"{bad_utf8}: cannot read (UnicodeDecodeError: ")


@pytest.mark.parametrize("chunk", [7, 16, 32, 100])
def test_many_small_events_cut_anywhere(tmp_path, monkeypatch, chunk):
    """The fast path decodes whole events in the buffer and hands a cut one to the careful path."""
    events = [{"a": i} for i in range(40)]
    for sep in (",", ", ", ",\n  "):
        text = '{"traceEvents": [' + sep.join(json.dumps(e) for e in events) + "]}"
        assert _read(_write(tmp_path, text), chunk, monkeypatch)[0] == events


def test_load_json(tmp_path):
    good = _write(tmp_path, '{"x": 1712345678901234.567, "y": [1, 2]}', "g.json")
    assert jsonstream.load_json(good, "a test file") == {"x": "1712345678901234.567", "y": [1, 2]}
    cases = [("m.json", None, "no such file or folder"),
             ("b.json", '{"x": 1,\n "y": }', "not valid JSON (Expecting value: line 2 column 7); expected a test file"),
             ("d.json", "[" * 100_000 + "]" * 100_000, "nests too deeply to be a document the tools read"),
             ("u.json", b'{"x": "\xff"}', "is not UTF-8 text (byte 0xff at offset 7)")]
    for name, text, message in cases:
        path = tmp_path / name if text is None else _write(tmp_path, text, name)
        with pytest.raises(InputError) as err:
            jsonstream.load_json(path, "a test file")
        assert str(err.value).startswith(f"{path}: {message}")
        assert str(err.value).endswith("; expected a test file")


def test_why():
    assert jsonstream._why(EOFError()) == "EOFError"
    assert jsonstream._why(OSError("disk")) == "OSError: disk"


def test_a_number_cut_by_the_buffer_is_read_whole(tmp_path, monkeypatch):
    text = '[12345678, {"t": 1712345678901234.567}, 9876]'
    for chunk in range(1, 12):
        assert _read(_write(tmp_path, text), chunk, monkeypatch)[0] == [{"t": "1712345678901234.567"}]
    text = '{"base": 1234567890123, "traceEvents": [{"a": 1}]}'
    for chunk in range(1, 12):
        assert _read(_write(tmp_path, text), chunk, monkeypatch)[1] == {"base": 1234567890123}


msgspec = pytest.importorskip("msgspec")


class _Ev(msgspec.Struct):
    a: int = 0
    s: str = ""


def _blocks(path, chunk, monkeypatch):
    monkeypatch.setattr(jsonstream, "_CHUNK", chunk)
    other: dict = {}
    items = list(jsonstream.iter_trace_blocks(path, _Ev, other.__setitem__))
    return items, other


def _flat(items):
    return [(e.a, e.s) if is_block else (e["a"], e.get("s", "")) for is_block, block in items
            for e in (block if is_block else [block])]


@pytest.mark.parametrize("chunk", [1, 5, 16, 64, 1 << 22])
def test_blocks_give_every_event_once_in_order(tmp_path, monkeypatch, chunk):
    events = [{"a": i, "s": "},{" * (i % 3) + "x"} for i in range(30)]
    for separators in ((", ", ": "), (",", ":")):  # compact: the next event starts right after '},'
        path = _write(tmp_path, json.dumps({"k": 1, "traceEvents": events, "z": [2]}, separators=separators))
        items, other = _blocks(path, chunk, monkeypatch)
        assert _flat(items) == [(e["a"], e["s"]) for e in events]
        assert other == {"k": 1, "z": [2]}


def test_a_small_trace_is_one_block_and_its_last_event(tmp_path, monkeypatch):
    path = _write(tmp_path, "[" + ", ".join(json.dumps({"a": i}) for i in range(5)) + "]")
    items, _ = _blocks(path, 1 << 22, monkeypatch)
    assert [(flag, len(b) if flag else b) for flag, b in items] == [(True, 4), (False, {"a": 4})]


@pytest.mark.parametrize("text", ["[]", '{"traceEvents": []}', '{"traceEvents": [ ]}'])
def test_blocks_of_an_empty_array(tmp_path, monkeypatch, text):
    assert _blocks(_write(tmp_path, text), 1 << 22, monkeypatch) == ([], {})


def test_a_value_of_another_type_is_not_plain(tmp_path, monkeypatch):
    path = _write(tmp_path, '[{"a": 1}, {"a": "x"}, {"a": 3}]')
    with pytest.raises(jsonstream.NotPlain, match=r"Expected `int`, got `str`"):
        _blocks(path, 1 << 22, monkeypatch)


def test_non_object_elements_of_the_array(tmp_path, monkeypatch):
    monkeypatch.setattr(jsonstream, "_CHUNK", 1 << 22)
    # the last element is decoded the general way: dropped when it is not an object
    path = _write(tmp_path, '[{"a": 1}, {"a": 2}, 7]')
    assert _flat(jsonstream.iter_trace_blocks(path, _Ev)) == [(1, ""), (2, "")]
    # inside a block, a number does not fit the struct: not plain
    path = _write(tmp_path, '[{"a": 1}, 7, {"a": 2}, {"a": 3}]', "u.json")
    with pytest.raises(jsonstream.NotPlain, match="Expected `object`"):
        list(jsonstream.iter_trace_blocks(path, _Ev))


def test_text_after_an_empty_object(tmp_path, monkeypatch):
    assert _message(tmp_path, monkeypatch, "{}x") == ("unexpected text after the JSON document, found 'x'; expected "
                                                      "a Chrome-trace JSON document")


def test_the_size_limit_boundary(tmp_path, monkeypatch):
    """Buffers of 8: after '[' 7 characters, then 15; an unfinished event of 15 characters is at the limit 15."""
    text = '[{"a": "' + "x" * 10 + '"}]'  # the event is 19 characters
    monkeypatch.setattr(jsonstream, "_MAX_VALUE", 15)
    with pytest.raises(InputError, match="invalid JSON"):
        _read(_write(tmp_path, text), 8, monkeypatch)
    monkeypatch.setattr(jsonstream, "_MAX_VALUE", 16)
    assert _read(_write(tmp_path, text), 8, monkeypatch)[0] == [{"a": "x" * 10}]


def test_a_trace_longer_than_the_buffer_still_comes_in_blocks(tmp_path, monkeypatch):
    """Every event (about 12 characters) fits in a 64-character buffer: the buffer is refilled before each cut,
    so all events but the last arrive in blocks (the docstring's promise); one at a time would be the slow path."""
    events = [{"a": i} for i in range(60)]
    path = _write(tmp_path, json.dumps(events, separators=(",", ":")))
    items, _ = _blocks(path, 64, monkeypatch)
    assert _flat(items) == [(i, "") for i in range(60)]
    assert [flag for flag, _ in items].count(False) == 1 and items[-1] == (False, {"a": 59})


@pytest.mark.parametrize("text", ['[{"a": 1}, {"a": 2}]', '{"traceEvents": [{"a": 1}]}', '[{"a": 1}, }'])
@pytest.mark.parametrize("blocks", [False, True])
def test_the_file_is_closed_after_reading_or_failing(tmp_path, monkeypatch, text, blocks):
    import io
    from types import SimpleNamespace
    opened = []   # the reader's text wrappers, held here so that no garbage collection closes them instead

    def recording_wrapper(*args, **kwargs):
        fh = io.TextIOWrapper(*args, **kwargs)
        opened.append(fh)
        return fh
    monkeypatch.setattr(jsonstream, "io", SimpleNamespace(TextIOWrapper=recording_wrapper))
    path = _write(tmp_path, text)
    def read():
        return list(jsonstream.iter_trace_blocks(path, _Ev) if blocks else jsonstream.iter_trace(path))
    if text.endswith(", }"):
        with pytest.raises(InputError):
            read()
    else:
        assert len(read()) >= 1
    assert len(opened) == 1 and opened[0].closed


def test_every_buffer_boundary_between_an_event_and_its_separator(tmp_path, monkeypatch):
    """Spaces around the separators, read at every buffer size: a buffer that ends after an event and its
    trailing space, before the ',' or ']', must hand the rest to the careful path (never index past the text)."""
    text = '[{"a": 1} , {"a": 2} ,7 , {"a": 3} ]'
    path = _write(tmp_path, text)
    for chunk in range(1, len(text) + 2):
        assert _read(path, chunk, monkeypatch)[0] == [{"a": 1}, {"a": 2}, {"a": 3}], chunk


def test_a_cut_inside_a_string_is_passed_over_for_an_earlier_one(tmp_path, monkeypatch):
    """The last '},' of the buffer lies inside the last event's string: that cut does not decode, the one
    before it does, so the first two events are one block and only the last comes alone."""
    path = _write(tmp_path, '[{"a": 0}, {"a": 1}, {"a": 2, "s": "},"}]')
    items, _ = _blocks(path, 1 << 22, monkeypatch)
    assert [(flag, len(b) if flag else b) for flag, b in items] == [(True, 2), (False, {"a": 2, "s": "},"})]
