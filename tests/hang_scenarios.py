"""Worker for tests/test_hang_doctor.py: one rank of a small gloo job that hangs in a known way and
writes its Flight Recorder dump through ditpar.hang.record (run as a script, one process per rank).

usage: python hang_scenarios.py SCENARIO RANK WORLD PORT DUMP_DIR
"""

from __future__ import annotations

import datetime
import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from ditpar.hang import record  # noqa: E402

HANG_S = 5.0        # a hung rank dumps this long after its scenario started (ample on a loaded machine)
LONG = datetime.timedelta(seconds=60)   # collectives never time out before the dump


OUT = ""


def _exit(_path: Path) -> None:
    """After the pickle dump: the same buffer as JSON beside it (DUMP_DIR_json), then leave at once."""
    record.dump(OUT + "_json", fmt="json")
    sys.stdout.flush()
    os._exit(0)


def healthy(dist, torch, rank: int, world: int) -> None:
    """U2 R2 on 4 ranks: same groups, same order, same calls everywhere."""
    uly = [dist.new_group(g, timeout=LONG) for g in ([0, 1], [2, 3])][rank // 2]
    ring = [dist.new_group(g, timeout=LONG) for g in ([0, 2], [1, 3])][rank % 2]
    for _ in range(2):
        dist.all_to_all_single(torch.empty(8), torch.ones(8), group=uly)
        dist.all_gather_into_tensor(torch.empty(8), torch.ones(4), group=ring)
    dist.all_reduce(torch.ones(3))


def cache_skip(dist, torch, rank: int, world: int) -> None:
    """Ulysses 2, 4 steps of two all-to-alls; rank 1's cache says 'skip' at step 2, then both gather."""
    uly = dist.new_group([0, 1], timeout=LONG)
    for step in range(4):
        if rank == 1 and step == 2:
            continue                                   # cache hit on this rank only
        dist.all_to_all_single(torch.empty(8), torch.ones(8), group=uly)   # q, k, v in
        dist.all_to_all_single(torch.empty(8), torch.ones(8), group=uly)   # output back
    dist.all_gather_into_tensor(torch.empty(16), torch.ones(8), group=uly)  # latents for the VAE


def creation_order(dist, torch, rank: int, world: int) -> None:
    """Text-encoder TP2 groups and the DiT Ulysses-4 group created in a different order on ranks 2, 3."""
    def te():
        return [dist.new_group(g, timeout=LONG) for g in ([0, 1], [2, 3])]

    if rank < 2:
        te_groups = te()
        uly = dist.new_group([0, 1, 2, 3], timeout=LONG)
    else:
        uly = dist.new_group([0, 1, 2, 3], timeout=LONG)
        te_groups = te()
    # SIGUSR1 makes the watcher thread dump while the main thread is blocked inside a collective.
    # gloo names groups by the creation counter, so ranks 0,1's "1" and ranks 2,3's "1" connect through
    # the same store keys: which call hangs (the encoder all-reduce or the all-to-all) is a race, the
    # mismatched membership is not
    threading.Timer(HANG_S, os.kill, (os.getpid(), signal.SIGUSR1)).start()
    dist.all_reduce(torch.ones(5), group=te_groups[rank // 2])   # text encoder
    dist.all_to_all_single(torch.empty(8), torch.ones(8), group=uly)


def created_on_one_rank(dist, torch, rank: int, world: int) -> None:
    """Rank 1 creates a group of its own ([1]) before the shared one: group "1" is [0,1] on rank 0 and [1]
    on rank 1. Rank 1 all-reduces twice in its own group, then both hang in the shared one, which rank 1
    calls "2". With torch's empty gloo pg_config only the entries show it: rank 1 completed two calls in a
    group "1" that rank 0 issued one call in."""
    own = dist.new_group([1], timeout=LONG) if rank == 1 else None
    shared = dist.new_group([0, 1], timeout=LONG)
    if rank == 1:
        dist.all_reduce(torch.ones(4), group=own)                  # a group of one: completes at once
        dist.all_reduce(torch.ones(4), group=own)
    dist.all_reduce(torch.ones(4), group=shared)                   # "1" on rank 0, "2" on rank 1: hangs


def missing_rank(dist, torch, rank: int, world: int) -> None:
    """Two world all-reduces, then rank 3 stays in its own compute while the others all-reduce."""
    dist.all_reduce(torch.ones(4))
    dist.all_reduce(torch.ones(4))
    if rank == 3:
        time.sleep(60)
    dist.all_reduce(torch.ones(4))


def size_mismatch(dist, torch, rank: int, world: int) -> None:
    """Ulysses 2: one all-to-all, then a broadcast whose length differs on rank 1 (a shape branch).

    gloo aborts a rank that receives more bytes than it posted, so the sender holds the shorter buffer."""
    uly = dist.new_group([0, 1], timeout=LONG)
    dist.all_to_all_single(torch.empty(8), torch.ones(8), group=uly)
    dist.broadcast(torch.ones(1000 if rank == 0 else 1024), src=0, group=uly)


def group_order(dist, torch, rank: int, world: int) -> None:
    """Two groups over the same two ranks (text-encoder TP and Ulysses) entered in opposite orders."""
    te = dist.new_group([0, 1], timeout=LONG)
    uly = dist.new_group([0, 1], timeout=LONG)
    if rank == 0:
        dist.all_reduce(torch.ones(5), group=te)
        dist.all_to_all_single(torch.empty(8), torch.ones(8), group=uly)
    else:
        dist.all_to_all_single(torch.empty(8), torch.ones(8), group=uly)
        dist.all_reduce(torch.ones(5), group=te)


SCENARIOS = {f.__name__: f for f in (healthy, cache_skip, creation_order, missing_rank, size_mismatch,
                                      group_order, created_on_one_rank)}


def main() -> None:
    global OUT
    name, rank, world, port, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    OUT = out
    os.environ["TORCH_GLOO_LAZY_INIT"] = "1"   # connect at the first collective, as NCCL and HCCL do
    record.enable(out, buffer_size=200)
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=LONG)
    try:
        with record.hang_watch(out, after_s=None if name in ("healthy", "creation_order") else HANG_S,
                               on_dump=_exit):
            SCENARIOS[name](dist, torch, rank, world)
    except Exception:
        _exit(Path(out))     # the watcher already dumped
    if name in ("healthy", "size_mismatch"):   # these end; the others hang and dump from the watcher
        dist.barrier()
        record.dump(out)
    _exit(Path(out))


if __name__ == "__main__":
    main()
