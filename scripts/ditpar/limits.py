"""Bounds on sizes no real job has, and the one check of a number read from a file.

A size read from a file gets the bound its flag has (plan.py --devices 1..1024 bounds a table's
n_devices and a scope record's world_size too), so a damaged file can neither run a tool for minutes
nor fill memory; a field that is not a finite number of the right kind and range is an input error
that names the field and what was expected (never a traceback from int64 or a type error later).
"""

from __future__ import annotations

import math

from ditpar.errors import InputError

MAX_DEVICES = 1024        # devices of one job: 128 nodes of 8 (plan.py --devices, ranks, world_size, n_devices)
MAX_NODE_DEVICES = 64     # devices in one node's topology matrix (the largest single hosts have 16)
MAX_RANK_ID = 2**20 - 1   # a rank id read from a profile or record; far above any job, far inside int64
MAX_STEPS = 10_000        # denoising steps of one request (plan.py --steps; a table's steps column)
MAX_FRAMES = 10_000       # frames of one video request (plan.py --frames; a table's resolution)
MAX_PIXELS_SIDE = 16_384  # pixels along one side of an image (plan.py --resolution; a table's resolution)
MAX_HEADS = 4096          # attention heads (plan.py --heads, --kv-heads; a model file's heads)
MAX_LAYERS = 10_000       # transformer blocks (plan.py --layers; a model file's layers)
MAX_TOKENS = 100_000_000  # tokens of one sample (plan.py --tokens; a model file's tokens)
MAX_PARAMS_B = 10_000.0   # billions of weights of one model (10 T): a model file's params_b


def integer(value: object, where: str, lo: int, hi: int) -> int:
    """value as an int in lo..hi: a JSON/TOML integer, an integral float or a decimal text; else InputError."""
    got = _parse(value, where, f"an integer {lo}..{hi}")
    if isinstance(got, float):
        if not got.is_integer() or not math.isfinite(got):
            raise InputError(f"{where}: expected an integer {lo}..{hi}, got {value!r}")
        if not lo <= got <= hi:
            raise InputError(f"{where}: {value!r} is out of range; expected an integer {lo}..{hi}")
        got = int(got)
    if not lo <= got <= hi:
        raise InputError(f"{where}: {value!r} is out of range; expected an integer {lo}..{hi}")
    return got


def number(value: object, where: str, lo: float | None = None, hi: float | None = None,
           lo_open: bool = False) -> float:
    """value as a finite float within [lo, hi] (or (lo, hi] with lo_open); else InputError naming where."""
    want = _range_text(lo, hi, lo_open)
    got = float(_parse(value, where, f"a finite number{want}"))
    if not math.isfinite(got):
        raise InputError(f"{where}: expected a finite number{want}, got {value!r}")
    if (lo is not None and (got < lo or (lo_open and got == lo))) or (hi is not None and got > hi):
        raise InputError(f"{where}: {value!r} is out of range; expected a finite number{want}")
    return got


def _range_text(lo: float | None, hi: float | None, lo_open: bool) -> str:
    if lo is None and hi is None:
        return ""
    if hi is None:
        return f" {'>' if lo_open else '>='} {lo:g}"
    if lo is None:
        return f" <= {hi:g}"
    return f" in {'(' if lo_open else '['}{lo:g}, {hi:g}]"


def _parse(value: object, where: str, want: str) -> int | float:
    if isinstance(value, bool) or value is None:
        raise InputError(f"{where}: expected {want}, got {value!r}")
    if isinstance(value, (int, float)):
        return value
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalars
        return _parse(value.item(), where, want)
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            pass
        try:
            return float(text)
        except ValueError:
            pass
    raise InputError(f"{where}: expected {want}, got {value!r}")
