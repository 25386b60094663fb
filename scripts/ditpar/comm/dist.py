"""torch.distributed set-up shared by the communication tools: backend choice, device, timeouts.

The device is bound from LOCAL_RANK *before* ``init_process_group``: on Ascend, without
``torch_npu.npu.set_device`` every rank binds the same HCCL port ("port already been bound").
A dead or hung peer ends the run with :class:`PeerFailure` (one line, exit 2) within the timeout.
torch is imported only when these functions run.
"""

from __future__ import annotations

import datetime
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ditpar.errors import DitParError, InputError

BACKENDS = ("auto", "hccl", "nccl", "gloo")


class PeerFailure(DitParError):
    """A collective or the rendezvous failed or timed out: a peer rank died, hung or is unreachable."""

    exit_code = 2


@dataclass
class DistContext:
    """What a tool needs to know about the running process group."""

    backend: str
    rank: int
    world: int
    local_rank: int
    device: Any  # torch.device
    timeout_s: float
    single_process: bool  # True when started without torchrun (a world of one)
    watchdog: Watchdog | None = field(default=None, repr=False)

    def sync(self) -> None:
        """Wait for the device queue (no-op on CPU)."""
        sync_device(self.device)


def npu_available() -> bool:
    """True when torch_npu imports and at least one NPU is visible."""
    try:
        import torch
        import torch_npu  # noqa: F401
    except Exception:
        return False
    npu = getattr(torch, "npu", None)
    return bool(npu is not None and npu.is_available() and npu.device_count() > 0)


def library(backend: str) -> str:
    """The collective library a torch backend runs here: RCCL under 'nccl' on a ROCm build of torch
    (torch.version.hip set), NCCL / HCCL under 'nccl' / 'hccl' elsewhere, the backend itself otherwise."""
    import torch

    if backend == "nccl":
        return "RCCL" if getattr(torch.version, "hip", None) else "NCCL"
    return {"hccl": "HCCL"}.get(backend, backend)


def choose_backend(requested: str = "auto") -> str:
    """hccl when torch_npu and an NPU are present, nccl on CUDA, gloo otherwise; or the forced one."""
    if requested not in BACKENDS:
        raise InputError(f"--backend {requested!r}: expected one of {', '.join(BACKENDS)}")
    import torch

    if requested == "hccl" and not npu_available():
        raise InputError("--backend hccl: torch_npu is not importable or no NPU is visible")
    if requested == "nccl" and not torch.cuda.is_available():
        raise InputError("--backend nccl: no CUDA device is visible")
    if requested != "auto":
        return requested
    if npu_available():
        return "hccl"
    if torch.cuda.is_available():
        return "nccl"
    return "gloo"


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise InputError(f"environment {name}={value!r}: expected an integer") from None


def free_port() -> int:
    """A TCP port that was free a moment ago (bind port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bind_device(backend: str, local_rank: int) -> Any:
    """Select this process's device; must run before init_process_group."""
    import torch

    if backend == "hccl":
        import torch_npu

        count = torch.npu.device_count()
        if local_rank >= count:
            raise InputError(f"LOCAL_RANK={local_rank}: only {count} NPU(s) visible on this node")
        torch_npu.npu.set_device(local_rank)
        return torch.device("npu", local_rank)
    if backend == "nccl":
        count = torch.cuda.device_count()
        if local_rank >= count:
            raise InputError(f"LOCAL_RANK={local_rank}: only {count} CUDA device(s) visible on this node")
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def world_from_env(expect_world: int | None = None) -> tuple[int, int, int, bool]:
    """(rank, world, local_rank, single_process) from torchrun's environment, checked without torch."""
    rank, world, local = _env_int("RANK"), _env_int("WORLD_SIZE"), _env_int("LOCAL_RANK")
    single = rank is None and world is None
    if single:
        rank, world, local = 0, 1, 0
    elif rank is None or world is None:
        raise InputError("environment: RANK and WORLD_SIZE must both be set (launch with torchrun)")
    local = rank if local is None else local
    if expect_world is not None and expect_world != world:
        raise InputError(f"--world-size {expect_world}: the launched world has {world} rank(s)")
    return rank, world, local, single


def setup(requested_backend: str = "auto", timeout_s: float = 300.0,
          expect_world: int | None = None) -> DistContext:
    """Initialise the default process group from torchrun's environment (or a world of one)."""
    if timeout_s <= 0:
        raise InputError(f"--timeout {timeout_s}: expected a positive number of seconds")
    rank, world, local, single = world_from_env(expect_world)
    import torch.distributed as dist

    backend = choose_backend(requested_backend)
    if single:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(free_port()))
        os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["LOCAL_RANK"] = "0", "1", "0"
    device = bind_device(backend, local)
    watchdog = Watchdog(rank, timeout_s + 30.0, world)
    watchdog.start()
    watchdog.pet("init_process_group")
    try:
        dist.init_process_group(backend=backend, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout_s))
    except Exception as exc:  # rendezvous timeout, refused connection, HCCL init error
        raise PeerFailure(
            f"rank {rank}: init_process_group({backend}) failed: {_short(exc)} "
            f"(check that all {world} ranks started, MASTER_ADDR/PORT, and on Ascend set_device/ports)"
        ) from None
    return DistContext(backend, rank, world, local, device, timeout_s, single, watchdog)


def new_group(ctx: DistContext, ranks: list[int]) -> Any:
    """A sub-communicator with the run's timeout (new_group's default is the library's, not ours).

    Every rank must call this for every group, in the same order, members or not.
    """
    import torch.distributed as dist

    return dist.new_group(ranks, timeout=datetime.timedelta(seconds=ctx.timeout_s))


def teardown(ctx: DistContext | None) -> None:
    """Destroy the process group if one exists and stop the watchdog."""
    import torch.distributed as dist

    if ctx is not None and ctx.watchdog is not None:
        ctx.watchdog.stop()
    if dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:
            pass


def sync_device(device: Any) -> None:
    """Block until the device has finished queued work."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "npu":
        torch.npu.synchronize(device)


def _short(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def peer_failure(ctx: DistContext, what: str, exc: BaseException) -> PeerFailure:
    """Wrap a failed collective into a one-line error that names the rank and the operation."""
    return PeerFailure(
        f"rank {ctx.rank}: {what} failed ({type(exc).__name__}: {_short(exc)}); "
        f"a peer rank died, hung past --timeout {ctx.timeout_s:g} s, or is unreachable"
    )


class Watchdog:
    """Backstop for backends that block without honouring the timeout: exit 2 when nothing progresses."""

    def __init__(self, rank: int, limit_s: float, world: int = 0) -> None:
        self.rank, self.limit_s, self.world = rank, limit_s, world   # world 0: unknown
        self._last = time.monotonic()
        self._label = "start"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ditpar-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def pet(self, label: str) -> None:
        """Record progress; label says what the rank is about to do."""
        self._last, self._label = time.monotonic(), label

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(min(1.0, self.limit_s / 10)):
            if time.monotonic() - self._last > self.limit_s:
                why = ("this one-process run has no peer: one step outlasted --timeout (a larger --timeout or a "
                       "smaller request)" if self.world == 1 else "a peer rank died or hangs")
                sys.stderr.write(f"error: rank {self.rank}: no progress for {self.limit_s:g} s in {self._label}; "
                                 f"{why} (watchdog exit)\n")
                sys.stderr.flush()
                os._exit(2)
