"""Record the per-rank shapes that reach attention, so a run can prove its sharding happened.

Sequence parallelism fails silently: a wrongly wrapped config or a hook that logs "applied" before
it registers leaves every rank computing the full sequence, and the output still looks right. The
only proof is a state quantity measured on every rank: the sequence length and head count each rank
actually feeds to attention. This module writes those shapes as JSON lines, one file per rank;
``scripts/scope_probe.py`` reads them back and compares them with full / degree.

Two ways to record (torch is never imported here; anything with a ``.shape`` works):

* ``ScopeRecorder(out_dir).attach(model, names=r"attn", stage="input")`` registers forward
  pre-hooks on the modules whose qualified name matches a regex (or whose class is in ``types``).
* ``record(name, q, k, v, stage="core", layout="BSHD")`` from inside your attention code. It writes
  only when the environment variable ``DITPAR_SCOPE_DIR`` is set, so the call can stay in the code,
  switched off by default.

A record is one line: ``{"schema", "tag", "rank", "world_size", "name", "stage", "call", "layout",
"q", "k", "v", "dtype"}`` where q, k, v are shape lists (k, v may be null). ``stage`` says where the
tensors were taken: ``input`` (this rank's slice before any sequence-parallel exchange) or ``core``
(the tensors the attention kernel gets, after the Ulysses all-to-all / K,V all-gather).
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

SCHEMA = "dit-parallel-opt/scope/v1"
STAGES = ("input", "core")
ENV_DIR = "DITPAR_SCOPE_DIR"
ENV_TAG = "DITPAR_SCOPE_TAG"
DEFAULT_MAX_CALLS = 8
_KWARG_ORDER = ("q", "k", "v", "query", "key", "value", "hidden_states", "encoder_hidden_states")


def check_layout(layout: str) -> str:
    """Validate a layout string such as BSHD: letters B, S, H, D, each at most once, S required."""
    text = layout.upper()
    if not text or set(text) - set("BSHD") or len(set(text)) != len(text) or "S" not in text:
        raise ValueError(
            f"layout {layout!r}: expected letters from B, S, H, D, each once, with S present "
            "(e.g. BSHD for (batch, seq, heads, head_dim), BHSD for torch SDPA, BSD for hidden states)"
        )
    return text


def _rank_and_world() -> tuple[int, int]:
    """This process's rank and world size: torch.distributed if it is up, else RANK/WORLD_SIZE."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size())
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def _shape(t: Any) -> list[int] | None:
    return None if t is None else [int(n) for n in tuple(t.shape)]


def _dtype(t: Any) -> str | None:
    dtype = getattr(t, "dtype", None)
    return None if dtype is None else str(dtype).replace("torch.", "")


def _is_tensor(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype")


class ScopeRecorder:
    """Writes shape records for one rank into ``out_dir/scope[-TAG]-rankR.jsonl``."""

    def __init__(self, out_dir: str | os.PathLike[str], tag: str = "",
                 max_calls: int = DEFAULT_MAX_CALLS, rank: int | None = None,
                 world_size: int | None = None) -> None:
        if tag and not re.fullmatch(r"[A-Za-z0-9_.-]+", tag):
            raise ValueError(f"tag {tag!r}: use letters, digits, '_', '.', '-' only")
        self.out_dir = Path(out_dir)
        self.tag = tag
        self.max_calls = int(max_calls)
        self._rank = rank
        self._world = world_size
        self._calls: dict[tuple[str, str], int] = {}
        self._file = None
        self._lock = threading.Lock()
        self._handles: list[Any] = []

    @property
    def path(self) -> Path:
        rank, _ = self._identity()
        stem = f"scope-{self.tag}-rank{rank}" if self.tag else f"scope-rank{rank}"
        return self.out_dir / f"{stem}.jsonl"

    def _identity(self) -> tuple[int, int]:
        rank, world = _rank_and_world()
        return (self._rank if self._rank is not None else rank,
                self._world if self._world is not None else world)

    def record(self, name: str, q: Any, k: Any = None, v: Any = None, *,
               stage: str = "core", layout: str = "BSHD") -> bool:
        """Write one record for the tensors q (and k, v); return False once max_calls is reached."""
        if stage not in STAGES:
            raise ValueError(f"stage {stage!r}: expected one of {', '.join(STAGES)}")
        layout = check_layout(layout)
        key = (name, stage)
        with self._lock:
            call = self._calls.get(key, 0)
            if self.max_calls > 0 and call >= self.max_calls:
                return False
            self._calls[key] = call + 1
            rank, world = self._identity()
            line = {
                "schema": SCHEMA, "tag": self.tag, "rank": rank, "world_size": world,
                "name": name, "stage": stage, "call": call, "layout": layout,
                "q": _shape(q), "k": _shape(k), "v": _shape(v), "dtype": _dtype(q),
            }
            if self._file is None:
                self._file = _open_shared(self.path)
            _write_shared(self._file, json.dumps(line) + "\n")
        return True

    def attach(self, model: Any, names: str | None = None, types: Iterable[Any] = (),
               stage: str = "input", layout: str = "BSD",
               inputs: Sequence[int | str] | None = None) -> int:
        """Register forward pre-hooks on matching submodules; return how many were hooked.

        names: regex searched in each qualified module name; types: classes or class names.
        inputs: which arguments are q, k, v (positions or keyword names); default: the first
        three tensor arguments, positional first, then q/k/v/query/key/value/hidden_states.
        """
        if names is None and not types:
            raise ValueError("attach: give names (a regex) or types (classes or class names)")
        if stage not in STAGES:
            raise ValueError(f"stage {stage!r}: expected one of {', '.join(STAGES)}")
        layout = check_layout(layout)
        pattern = re.compile(names) if names is not None else None
        wanted = tuple(types)
        hooked = 0
        for qualname, module in model.named_modules():
            by_name = pattern is not None and qualname and pattern.search(qualname)
            by_type = any(
                (isinstance(t, str) and type(module).__name__ == t)
                or (isinstance(t, type) and isinstance(module, t))
                for t in wanted
            )
            if not (by_name or by_type):
                continue
            hook = self._make_hook(qualname or type(module).__name__, stage, layout, inputs)
            self._handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))
            hooked += 1
        if hooked == 0:
            sample = [n for n, _ in model.named_modules() if n][:12]
            raise ValueError(
                f"attach: no module matched names={names!r} types={[getattr(t, '__name__', t) for t in wanted]}; "
                f"module names start with: {sample}"
            )
        return hooked

    def _make_hook(self, name: str, stage: str, layout: str, inputs: Sequence[int | str] | None):
        def hook(_module: Any, args: tuple, kwargs: dict) -> None:
            tensors = _pick_inputs(args, kwargs, inputs)
            if tensors:
                padded = list(tensors[:3]) + [None] * (3 - len(tensors[:3]))
                self.record(name, padded[0], padded[1], padded[2], stage=stage, layout=layout)
            return None

        return hook

    def detach(self) -> None:
        """Remove every hook this recorder registered."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def close(self) -> None:
        """Remove hooks and close the file."""
        self.detach()
        with self._lock:
            if self._file is not None:
                _close_shared(self._file)
                self._file = None

    def __enter__(self) -> ScopeRecorder:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# One file per (process, path): a second recorder on the same folder appends to the open file instead
# of truncating it (a run starts a fresh file when the first recorder writes).
_files: dict[Path, list[Any]] = {}  # path -> [file handle, users]
_files_lock = threading.Lock()


def _open_shared(path: Path) -> Path:
    with _files_lock:
        if path in _files:
            _files[path][1] += 1
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            _files[path] = [open(path, "w", encoding="utf-8"), 1]
    return path


def _write_shared(path: Path, text: str) -> None:
    with _files_lock:
        fh = _files[path][0]
        fh.write(text)
        fh.flush()


def _close_shared(path: Path) -> None:
    with _files_lock:
        entry = _files.get(path)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            entry[0].close()
            del _files[path]


def _pick_inputs(args: tuple, kwargs: dict, inputs: Sequence[int | str] | None) -> list[Any]:
    """The tensors a hook records: the named/positioned inputs, or the first tensor arguments."""
    if inputs is not None:
        picked = []
        for sel in inputs:
            if isinstance(sel, int):
                picked.append(args[sel] if sel < len(args) else None)
            else:
                picked.append(kwargs.get(sel))
        return picked
    found = [a for a in args if _is_tensor(a)]
    for key in _KWARG_ORDER:
        if len(found) >= 3:
            break
        if _is_tensor(kwargs.get(key)):
            found.append(kwargs[key])
    return found[:3]


_default: ScopeRecorder | None = None
_default_lock = threading.Lock()


def default_recorder() -> ScopeRecorder | None:
    """The process-wide recorder configured by DITPAR_SCOPE_DIR (and DITPAR_SCOPE_TAG), or None."""
    global _default
    out_dir = os.environ.get(ENV_DIR)
    if not out_dir:
        return None
    with _default_lock:
        if _default is None:
            _default = ScopeRecorder(out_dir, tag=os.environ.get(ENV_TAG, ""))
        return _default


def record(name: str, q: Any, k: Any = None, v: Any = None, *,
           stage: str = "core", layout: str = "BSHD") -> bool:
    """Record q, k, v shapes with the default recorder; a no-op (False) when DITPAR_SCOPE_DIR is unset."""
    rec = default_recorder()
    if rec is None:
        return False
    return rec.record(name, q, k, v, stage=stage, layout=layout)
