"""Results of pure functions remembered per input: one answer asks the same questions thousands of times.

Presets are frozen dataclasses that hold dicts (unhashable), so they are keyed by identity and kept with the
result: a reused id never returns another object's result (the kept objects are compared, identity first).
Callers read a remembered result, never change it. `off()` turns every memo off (the test that remembered and
recomputed answers are equal uses it).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from contextlib import contextmanager
from typing import Any

_ON = [True]
_ALL: list[Memo] = []
_DICTS: list[dict] = []   # plain dicts used as memos elsewhere (work.py's groups), emptied with the rest


class Memo:
    """compute(*args) remembered per (identities of `objs`, hashable `key`); emptied whole past `limit` entries."""

    def __init__(self, limit: int = 16384) -> None:
        self._d: dict[tuple, tuple[tuple, Any]] = {}
        self.limit = limit
        _ALL.append(self)

    def get(self, objs: tuple, key: Hashable, compute: Callable[..., Any], *args: Any) -> Any:
        if not _ON[0]:
            return compute(*args)
        k = (tuple([id(o) for o in objs]), key)
        hit = self._d.get(k)
        if hit is not None and hit[0] == objs:
            return hit[1]
        if len(self._d) >= self.limit:
            self._d.clear()
        out = compute(*args)
        self._d[k] = (objs, out)
        return out

    def clear(self) -> None:
        self._d.clear()


def register(d: dict) -> dict:
    """Have clear_all() and off() empty this dict too; returns it."""
    _DICTS.append(d)
    return d


def clear_all() -> None:
    """Empty every memo (what one answer remembered is of no use to another, and kept it slows the collector)."""
    for m in (*_ALL, *_DICTS):
        m.clear()


@contextmanager
def one_answer():
    """Memos live for one answer: emptied when it starts and when it ends."""
    clear_all()
    try:
        yield
    finally:
        clear_all()


@contextmanager
def off():
    """Every memo off (and emptied) inside the block: each result computed afresh."""
    _ON[0] = False
    clear_all()
    try:
        yield
    finally:
        _ON[0] = True
