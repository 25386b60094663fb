"""Make Flight Recorder dumps from a user's script: switch the recorder on, dump on demand, on an
exception, on a signal or after a time limit (gloo has no dump-on-timeout of its own)."""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ditpar import cli

DEFAULT_PREFIX = "fr_rank_"
DEFAULT_BUFFER = 20000


def enable(dump_dir: str | os.PathLike[str], prefix: str = DEFAULT_PREFIX,
           buffer_size: int = DEFAULT_BUFFER) -> dict[str, str]:
    """Set the recorder's environment variables that are not set yet; call before init_process_group.

    Returns the variables it set. Covers torch (TORCH_FR_*; the TORCH_NCCL_* names before torch 2.8) and
    torch_npu (TORCH_HCCL_*); the process group reads them when it is created.
    """
    target = str(Path(dump_dir) / prefix)
    wanted = {
        "TORCH_FR_BUFFER_SIZE": str(buffer_size),
        "TORCH_FR_DUMP_TEMP_FILE": target,
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_HCCL_TRACE_BUFFER_SIZE": str(buffer_size),
        "TORCH_HCCL_DEBUG_INFO_TEMP_FILE": target,
        "TORCH_HCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_HCCL_ENABLE_MONITORING": "1",
    }
    if _torch_before(2, 8):  # older torch reads only the NCCL names (NVIDIA/nvidia-resiliency-ext#163)
        wanted["TORCH_NCCL_TRACE_BUFFER_SIZE"] = str(buffer_size)
        wanted["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] = target
    Path(dump_dir).mkdir(parents=True, exist_ok=True)
    done = {}
    for key, value in wanted.items():
        if key not in os.environ:
            os.environ[key] = value
            done[key] = value
    return done


def _torch_before(major: int, minor: int) -> bool:
    """True when the installed torch is older than major.minor (False when torch is absent)."""
    try:
        from importlib.metadata import version

        parts = version("torch").split("+")[0].split(".")
        return (int(parts[0]), int(parts[1])) < (major, minor)
    except Exception:  # no torch, or a version string we cannot read: set the current names only
        return False


def _trace_bytes(fmt: str) -> bytes:
    """This process's Flight Recorder buffer as torch (or torch_npu for HCCL) writes it: pickle or JSON."""
    import torch.distributed as dist

    suffix = "_json" if fmt == "json" else ""
    backend = str(dist.get_backend()) if dist.is_initialized() else ""
    if backend == "hccl":
        import importlib

        npu_c10d = importlib.import_module("torch_npu._C._distributed_c10d")
        return getattr(npu_c10d, f"_dump_hccl_trace{suffix}")()
    from torch._C import _distributed_c10d as c10d

    for name in (f"_dump_fr_trace{suffix}", f"_dump_nccl_trace{suffix}"):
        fn = getattr(c10d, name, None)
        if fn is not None:
            return fn()
    raise RuntimeError(f"this torch has neither _dump_fr_trace{suffix} nor _dump_nccl_trace{suffix}")


def _group_table() -> dict[str, dict[str, str]]:
    """pg_config as NCCL writes it ({name: {name, desc, ranks}}) for every group this rank belongs to."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    table = {}
    for pg, name in list(c10d._world.pg_names.items()):
        ranks = dist.get_process_group_ranks(pg)
        desc = getattr(pg, "group_desc", "") or "undefined"
        table[str(name)] = {"name": str(name), "desc": str(desc), "ranks": str(sorted(ranks))}
    return table


def _with_groups(raw: bytes, fmt: str) -> bytes:
    """Fill pg_config where torch left it without named groups (gloo writes none, or one without a name),
    so every rank states its groups' members; torch's own table is kept under pg_config_torch."""
    import json

    from ditpar.hang.dumps import safe_unpickle

    doc = json.loads(raw) if fmt == "json" else safe_unpickle(raw)
    config = doc.get("pg_config") if isinstance(doc, dict) else None
    if not isinstance(config, dict):
        return raw
    named = [k for k, v in config.items() if k and isinstance(v, dict) and v.get("ranks") not in (None, "", "[]")]
    if named:
        return raw
    doc["pg_config_torch"] = config
    doc["pg_config"] = _group_table()
    doc["pg_config_source"] = "ditpar.hang.record (torch left pg_config without group names)"
    return json.dumps(doc).encode() if fmt == "json" else pickle.dumps(doc, protocol=2)


def dump(dump_dir: str | os.PathLike[str], prefix: str = DEFAULT_PREFIX, rank: int | None = None,
         fmt: str = "pickle") -> Path:
    """Write this rank's dump to DUMP_DIR/<prefix><rank> (pickle, with stacks) or <prefix><rank>.json
    (no stacks), whole or not at all, and return its path."""
    if fmt not in ("pickle", "json"):
        raise ValueError(f"fmt {fmt!r}: expected 'pickle' or 'json'")
    import torch.distributed as dist

    if rank is None:
        rank = dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))
    path = Path(dump_dir) / (f"{prefix}{rank}" + (".json" if fmt == "json" else ""))
    path.parent.mkdir(parents=True, exist_ok=True)
    cli.write_atomic(path, _with_groups(_trace_bytes(fmt), fmt))
    return path


@contextlib.contextmanager
def hang_watch(dump_dir: str | os.PathLike[str], *, after_s: float | None = None,
               signum: int | None = signal.SIGUSR1, prefix: str = DEFAULT_PREFIX,
               on_dump: Callable[[Path], None] | None = None) -> Iterator[None]:
    """Dump this rank's Flight Recorder buffer when the block raises, when `signum` arrives (also while
    the main thread is blocked inside a collective), or once when the block runs longer than `after_s`.

    `on_dump(path)` runs after each dump made by the watcher thread (e.g. to exit a hung test process).
    The signal reaches the watcher thread through `signal.set_wakeup_fd` (main thread only; the previous
    wakeup fd and handler come back when the block ends).
    """
    stop_r, stop_w = socket.socketpair()
    sig_r = sig_w = None
    old_fd = old_handler = None
    if signum is not None and threading.current_thread() is threading.main_thread():
        sig_r, sig_w = socket.socketpair()
        sig_r.setblocking(False)
        sig_w.setblocking(False)
        old_handler = signal.signal(signum, lambda *_: None)
        old_fd = signal.set_wakeup_fd(sig_w.fileno(), warn_on_full_buffer=False)

    # one dump at a time: the watcher's dump and on_dump (which may exit the process) and the main thread's dump
    # when the block raises never overlap, so an exit never cuts a write short and leaves its temporary file in
    # the dump folder (torch's fr_trace reads every file that holds the prefix, and fails on it)
    dumping = threading.Lock()

    def watch() -> None:
        deadline = None if after_s is None else time.monotonic() + after_s
        fired = False
        while True:
            wait = None if deadline is None or fired else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([s for s in (stop_r, sig_r) if s is not None], [], [], wait)
            if stop_r in ready:
                return
            wanted = False
            if sig_r is not None and sig_r in ready:
                with contextlib.suppress(BlockingIOError):
                    wanted = signum in sig_r.recv(64)
            if not ready and not fired:
                fired = wanted = True
            if wanted:
                with dumping:
                    path = dump(dump_dir, prefix)
                    if on_dump is not None:
                        on_dump(path)

    thread = threading.Thread(target=watch, name="ditpar-hang-watch", daemon=True)
    thread.start()
    try:
        yield
    except BaseException:
        try:
            with dumping:
                dump(dump_dir, prefix)
        except Exception as exc:  # the block's own error matters more than a failed dump
            import sys

            sys.stderr.write(f"hang_watch: could not dump the Flight Recorder buffer: {exc}\n")
        raise
    finally:
        stop_w.send(b"x")
        thread.join(timeout=5)
        if sig_w is not None:
            signal.set_wakeup_fd(old_fd if old_fd is not None else -1)
            signal.signal(signum, old_handler)  # type: ignore[arg-type]
            sig_r.close()  # type: ignore[union-attr]
            sig_w.close()
        stop_r.close()
        stop_w.close()
