"""ditpar.formats: every way a parser fails on hostile input ends as one InputError naming the file."""

from __future__ import annotations

import os
import threading

import pytest
from ditpar import files, formats
from ditpar.errors import InputError


def refused(call, *args, **kwargs) -> str:
    with pytest.raises(InputError) as err:
        call(*args, **kwargs)
    text = str(err.value)
    assert "\n" not in text
    return text


@pytest.mark.parametrize("text, message", [
    ("[" * 100_000 + "]" * 100_000, "d.json: nests too deeply"),
    ('{"a": 1' + "0" * 5000 + "}", "d.json: holds an integer of 5001 digits; no field takes more than 40"),
    ('{"a": NaN}', "d.json: holds NaN, which JSON does not allow"),
    ('{"a": -Infinity}', "d.json: holds -Infinity, which JSON does not allow"),
    ('{"a": 1,\n "b": }', "d.json: not valid JSON (Expecting value: line 2 column 7)"),
    ('"abc', "d.json: not valid JSON (Unterminated string starting at: line 1 column 1)"),
    ("[" * 65 + "]" * 65, "d.json: nests more than 64 levels"),
], ids=["deep", "5000-digits", "nan", "infinity", "syntax", "unterminated", "65-levels"])
def test_json_failures_are_one_line(text, message):
    assert refused(formats.json_text, text, "d.json").startswith(message)


def test_json_reads_what_it_should():
    assert formats.json_text("\ufeff{\"a\": [1, 2.5]}", "d.json") == {"a": [1, 2.5]}
    assert formats.json_text(b"\xef\xbb\xbf[1]", "d.json") == [1]            # a UTF-8 byte-order mark
    assert formats.json_text('{"t": 1712345678901234.567}', "d.json", parse_float=str) == {"t": "1712345678901234.567"}
    assert formats.json_text("[" * 64 + "]" * 64, "d.json") is not None       # 64 levels are allowed
    assert formats.json_text('{"a": NaN}', "d.json", nonfinite=True)["a"] != 0
    assert formats.json_text(str(2**127), "d.json") == 2**127                 # 39 digits


def test_json_names_utf16():
    assert "UTF-16" in refused(formats.json_text, '{"a": 1}'.encode("utf-16"), "d.json")


@pytest.mark.parametrize("text, message", [
    ("a = " + "[" * 50_000 + "]" * 50_000, "t.toml: nests too deeply"),
    ("a." * 50_000 + "b = 1", "t.toml: a key of 50,001 dotted parts"),
    ("a = 1" + "0" * 5000, "t.toml: not valid TOML"),
    ("a = 1" + "0" * 45, "t.toml: holds an integer of more than 40 digits"),
    ("a = [1, 2", "t.toml: not valid TOML"),
], ids=["deep-array", "dotted-key", "5000-digits", "45-digits", "syntax"])
def test_toml_failures_are_one_line(text, message):
    assert refused(formats.toml_text, text, "t.toml").startswith(message)


@pytest.mark.parametrize("text, message", [
    ("[" + ", ".join(["1"] * 400_000) + "]", "cell: a literal of 1,200,000 characters; at most 1,000,000"),
    ("[" * 200 + "]" * 200, "cell: nests more than 64 levels"),
    ("__import__('os').system('true')", "cell: not a Python literal"),
    ("[1, 2", "cell: not a Python literal"),
    ("1" + "0" * 60, "cell: holds an integer of more than 40 digits"),
], ids=["long", "deep", "call", "syntax", "huge-int"])
def test_python_literal_failures_are_one_line(text, message):
    assert refused(formats.python_literal, text, "cell").startswith(message)


def test_python_literal_reads_rank_lists():
    assert formats.python_literal("[0, 1, 2, 3]", "cell") == [0, 1, 2, 3]
    assert formats.python_literal("(0, 1)", "cell") == (0, 1)


def test_shared_references_are_counted_as_often_as_reached():
    leaf = [1] * 5
    assert formats.check_depth([leaf] * 3, "p", max_nodes=19) is None       # 1 + 3 x (1 + 5) values
    assert "more than 18 values" in refused(formats.check_depth, [leaf] * 3, "p", max_nodes=18)
    doubled = [1]
    for _ in range(60):                 # 2**60 leaves in 61 list objects: refused without expanding them
        doubled = [doubled, doubled]
    assert "more than 20,000,000 values" in refused(formats.check_depth, doubled, "p")


def test_a_value_that_contains_itself_is_refused():
    loop: list = []
    loop.append({"x": loop})
    assert refused(formats.check_depth, loop, "p") == "p: refers to itself (a value contains itself); not plain data"


def test_load_json_reads_a_fifo_once_and_refuses_a_device(tmp_path):
    fifo = tmp_path / "doc.json"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text('{"ok": true}'))
    writer.start()
    try:
        assert formats.load_json(fifo) == {"ok": True}
    finally:
        writer.join()
        files.reset()
    assert "/dev/zero: is a device" in refused(formats.load_json, "/dev/zero")


def test_a_stream_that_never_ends_is_an_error_not_a_full_memory(monkeypatch):
    monkeypatch.setattr(files, "MAX_STREAM_BYTES", 1 << 20)
    read, write = os.pipe()

    def writer():
        try:
            with os.fdopen(write, "wb") as fh:
                while True:
                    fh.write(b"x" * 65536)
        except OSError:
            pass

    threading.Thread(target=writer, daemon=True).start()
    try:
        message = refused(files.read_input, f"/dev/fd/{read}")
    finally:
        os.close(read)
        files.reset()
    assert message == f"/dev/fd/{read}: a stream of more than 0.000976562 GiB; the tools read a pipe whole, " \
                      "so save a larger input to a file"
