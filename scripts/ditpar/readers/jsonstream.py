"""Streaming reader of Chrome-trace JSON (Kineto traces, torch_npu trace_view.json), .json or .json.gz.

A trace is either a bare array of events or an object whose ``traceEvents`` member is that array.
Events are decoded one at a time from a bounded buffer, so a multi-GB trace never sits in memory as
Python objects. Floats are kept as their decimal text (``parse_float=str``): absolute stamps are
then converted exactly by :mod:`ditpar.timeparse`, never through float64.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

from ditpar import files, formats
from ditpar.errors import InputError

_CHUNK = 1 << 22  # characters read at a time
_MAX_VALUE = 1 << 27  # one event (or top-level member) larger than this is not a trace: stop reading
_WS = re.compile(r"[ \t\n\r]*")
_SEP = re.compile(r"[ \t\n\r]*(,)?[ \t\n\r]*")
_DECODER = json.JSONDecoder(parse_float=str)


class _Buffer:
    """A text buffer over a file that refills on demand."""

    def __init__(self, path: Path):
        self.path = path
        handle = files.open_input(path)   # a FIFO read once, a device or folder refused: never a hang
        raw = gzip.GzipFile(fileobj=handle, mode="rb") if path.name.endswith(".gz") else handle
        self.fh = io.TextIOWrapper(raw, encoding="utf-8", errors="strict")
        self.text = ""
        self.pos = 0
        self.dropped = 0  # characters of the file before ``text`` (read and let go): positions name the file's
        self.eof = False

    def close(self) -> None:
        self.fh.close()

    def more(self) -> bool:
        """Read another chunk; False at end of file."""
        if self.eof:
            return False
        try:
            chunk = self.fh.read(_CHUNK)
        except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
            raise InputError(f"{self.path}: cannot read ({_why(exc)}); expected a JSON trace") from None
        if not chunk:
            self.eof = True
            return False
        self.dropped += self.pos
        self.text = self.text[self.pos:] + chunk
        self.pos = 0
        return True

    def skip_ws(self) -> None:
        while True:
            self.pos = _WS.match(self.text, self.pos).end()
            if self.pos < len(self.text) or not self.more():
                return

    def peek(self) -> str:
        self.skip_ws()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expect(self, char: str, what: str) -> None:
        got = self.peek()
        if got != char:
            self.fail(f"expected {what}", got)
        self.pos += 1

    def value(self) -> Any:
        """Decode one JSON value at the cursor, reading more text until it is complete."""
        self.skip_ws()
        while True:
            try:
                value, end = _DECODER.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as exc:
                # incomplete at the end of the buffer: read on, unless one value is already huge
                if len(self.text) - self.pos < _MAX_VALUE and self.more():
                    continue
                at_end = exc.pos >= len(self.text.rstrip()) or exc.msg.startswith("Unterminated string")
                if self.eof and at_end:
                    self.fail(f"invalid JSON ({exc.msg})", "")
                self.fail(f"invalid JSON ({exc.msg}) at character {self.dropped + exc.pos}", None)
            except RecursionError:
                self.fail("invalid JSON (nested too deeply)", None)
            if end >= len(self.text) and self.more():
                continue  # a number or literal may continue in the next chunk
            self.pos = end
            return value

    def fail(self, what: str, got: str | None) -> NoReturn:
        if got == "":
            raise InputError(f"{self.path}: file ends early ({what}); the trace is truncated")
        shown = "" if got is None else f", found {got!r}"
        raise InputError(f"{self.path}: {what}{shown}; expected a Chrome-trace JSON document")


def _why(exc: BaseException) -> str:
    return type(exc).__name__ + (f": {exc}" if str(exc) else "")


def iter_trace(path: str | Path, on_key: Callable[[str, Any], None] | None = None) -> Iterator[dict]:
    """Yield the events of a trace; call ``on_key(name, value)`` for every other top-level member."""
    return _walk(Path(path), _array, on_key)


def _walk(path: Path, read_array: Callable[[_Buffer], Iterator[Any]],
          on_key: Callable[[str, Any], None] | None) -> Iterator[Any]:
    """Walk a bare event array or an object with a ``traceEvents`` array: ``read_array`` yields what the
    array holds, ``on_key(name, value)`` gets every other top-level member."""
    buf = _Buffer(path)
    try:
        buf.more()
        first = buf.peek()
        if first == "[":
            yield from read_array(buf)
            _end(buf)
            return
        if first != "{":
            buf.fail("expected '[' or '{' at the start", first)
        buf.pos += 1
        seen_events = False
        if buf.peek() == "}":
            buf.pos += 1
        else:
            while True:
                key = buf.value()
                if not isinstance(key, str):
                    buf.fail("expected a member name", str(key))
                buf.expect(":", "':' after a member name")
                if key == "traceEvents" and buf.peek() == "[":
                    seen_events = True
                    yield from read_array(buf)
                else:
                    value = buf.value()
                    if on_key is not None:
                        on_key(key, value)
                sep = buf.peek()
                if sep == ",":
                    buf.pos += 1
                    continue
                if sep == "}":
                    buf.pos += 1
                    break
                buf.fail("expected ',' or '}' between members", sep)
        _end(buf)
        if not seen_events:
            raise InputError(f"{path}: JSON object without a 'traceEvents' array; expected a Chrome trace")
    finally:
        buf.close()


class NotPlain(Exception):
    """The trace holds a value of a type the typed block decoder does not take: read it the general way."""


#: a block decoder tries this many cut points of one buffer before it takes one event at a time
_CUT_TRIES = 8


def iter_trace_blocks(path: str | Path, block_type: object,
                      on_key: Callable[[str, Any], None] | None = None) -> Iterator[tuple[bool, Any]]:
    """The events of a trace as ``(True, list)`` blocks decoded by msgspec as ``list[block_type]``,
    and ``(False, dict)`` for single events decoded the general way (a stretch no cut fits, the last
    event); ``on_key`` as in :func:`iter_trace`. Raises :class:`NotPlain` when msgspec rejects a
    value's type: the caller then reads the file with :func:`iter_trace`.

    A block runs from the cursor (the start of an event) to a ``}`` followed by ``,``. Wrapped in
    ``[...]`` such a text is valid JSON only when that ``}`` closes an event of the array (inside a
    string or a nested object the brackets or the string would be left open), so a block that
    decodes is exactly the events it holds.
    """
    import msgspec

    decoder = msgspec.json.Decoder(list[block_type])
    return _walk(Path(path), lambda buf: _array_blocks(buf, decoder), on_key)


def _array_blocks(buf: _Buffer, decoder: Any) -> Iterator[tuple[bool, Any]]:
    import msgspec

    buf.expect("[", "'['")
    if buf.peek() == "]":
        buf.pos += 1
        return
    while True:
        if len(buf.text) - buf.pos < _CHUNK:
            buf.more()
        text, pos = buf.text, buf.pos
        cut, block = len(text), None
        for _ in range(_CUT_TRIES):
            cut = text.rfind("},", pos, cut)
            if cut < 0:
                break
            try:
                block = decoder.decode("[" + text[pos:cut + 1] + "]")
            except msgspec.ValidationError as exc:
                raise NotPlain(str(exc)) from None
            except msgspec.DecodeError:
                continue
            break
        if block is not None:
            yield True, block
            buf.pos = cut + 2  # past the '},'
            buf.skip_ws()
            continue
        # no cut fits (the last event, or one larger than the buffer): one event the general way
        item, more = _careful_event(buf)
        if isinstance(item, dict):
            yield False, item
        if not more:
            return


def _array(buf: _Buffer) -> Iterator[dict]:
    buf.expect("[", "'['")
    if buf.peek() == "]":
        buf.pos += 1
        return
    decode, sep = _DECODER.raw_decode, _SEP.match
    while True:
        # fast path: decode events straight from the buffer while they lie wholly inside it
        text, pos = buf.text, buf.pos
        size = len(text)
        while True:
            try:
                item, end = decode(text, pos)
            except (json.JSONDecodeError, RecursionError):
                break
            if end >= size:
                break  # a scalar may continue in the next chunk: take the careful path
            m = sep(text, end)
            after = m.end()
            if after >= size:
                break
            if isinstance(item, dict):
                yield item
            if m.group(1):
                pos = after
                continue
            if text[after] == "]":
                buf.pos = after + 1
                return
            buf.fail("expected ',' or ']' between events", text[after])
        buf.pos = pos
        item, more = _careful_event(buf)
        if isinstance(item, dict):
            yield item
        if not more:
            return


def _careful_event(buf: _Buffer) -> tuple[Any, bool]:
    """One array element decoded with refills, then its separator: (the element, whether more follow)."""
    item = buf.value()
    got = buf.peek()
    if got == ",":
        buf.pos += 1
        buf.skip_ws()
        return item, True
    if got == "]":
        buf.pos += 1
        return item, False
    buf.fail("expected ',' or ']' between events", got)


def _end(buf: _Buffer) -> None:
    if buf.peek() != "":
        buf.fail("unexpected text after the JSON document", buf.peek())


def load_json(path: str | Path, what: str) -> Any:
    """Load a small JSON file (metadata, communication.json) with floats kept as text."""
    path = Path(path)
    try:
        return formats.json_text(files.read_input(path), str(path), parse_float=str, walk=False, nonfinite=True)
    except InputError as exc:
        raise InputError(f"{exc}; expected {what}") from None
