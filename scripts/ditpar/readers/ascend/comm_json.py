"""communication.json reduced to the fields the Ascend reader uses, without building the whole tree.

A 7k-op communication.json (24 MB) parsed whole is about 125 MB of Python objects, and the freed tree
leaves the heap fragmented for the rest of the rank's read. Here msgspec keeps each op as a raw slice
of the file and decodes only its time fields and per-transport transit sizes. Values come out as
``json.loads(..., parse_float=str)`` gives them (numbers with a fraction or exponent as their text),
so the reader's checks and messages see exactly what the whole-file parse would give.
"""

from __future__ import annotations

import re

import msgspec

from ditpar import formats

TIME_INFO = "Communication Time Info"
BANDWIDTH_INFO = "Communication Bandwidth Info"
#: the per-step entry that sums the others (the reader skips it)
TOTAL_KEY = "Total Op Info"

_STEPS = msgspec.json.Decoder(dict[str, dict[str, dict[str, msgspec.Raw]]])
_OBJECT = msgspec.json.Decoder(dict[str, msgspec.Raw])
_INTEGER = re.compile(rb"-?\d+")
_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")


class NotPlain(Exception):
    """The file is not in the plain shape this read assumes: parse it whole instead."""


def raw_ops(text: str) -> dict[str, dict[str, dict[str, msgspec.Raw]]]:
    """{step: {kind: {op: raw JSON of the op}}}: three levels decoded, every op left as a slice of ``text``.
    Raises NotPlain when the file is not JSON or a level is not an object (the whole parse names it)."""
    try:
        return _STEPS.decode(text)
    except (msgspec.DecodeError, ValueError, RecursionError):  # ValidationError is a DecodeError
        raise NotPlain from None


def prune(raw: msgspec.Raw, time_fields: tuple[str, ...], transports: tuple[str, ...],
          link_fields: str | tuple[str, ...]) -> dict:
    """One op as {TIME_INFO: {field: value}, BANDWIDTH_INFO: {transport: {link field: value}}}, only those
    fields; NotPlain when a part is not an object (the whole parse then decides what that means)."""
    try:
        return _prune(raw, time_fields, transports, (link_fields,) if isinstance(link_fields, str) else link_fields)
    except (msgspec.DecodeError, ValueError, RecursionError):
        raise NotPlain from None


def _prune(raw: msgspec.Raw, time_fields: tuple[str, ...], transports: tuple[str, ...],
           link_fields: tuple[str, ...]) -> dict:
    op = _OBJECT.decode(raw)
    pruned: dict = {}
    if TIME_INFO in op:
        info = _OBJECT.decode(op[TIME_INFO])
        pruned[TIME_INFO] = {k: _value(info[k]) for k in time_fields if k in info}
    if BANDWIDTH_INFO in op:
        links = _OBJECT.decode(op[BANDWIDTH_INFO])
        sizes = {}
        for transport in transports:
            if transport in links:
                entry = _OBJECT.decode(links[transport])
                sizes[transport] = {k: _value(entry[k]) for k in link_fields if k in entry}
        pruned[BANDWIDTH_INFO] = sizes
    return pruned


def _value(raw: msgspec.Raw) -> object:
    """One JSON value as ``json.loads(parse_float=str)`` gives it."""
    data = bytes(raw)
    if _INTEGER.fullmatch(data) and len(data) <= formats.MAX_INT_DIGITS:
        return int(data)
    if _NUMBER.fullmatch(data):
        return data.decode("ascii")
    return formats.json_text(data, "a communication.json value", parse_float=str, walk=False, nonfinite=True)
