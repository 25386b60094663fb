"""A real all-to-all run that logs audit fingerprints, clean or with one injected fault.

This is the audit's negative control: each fault must produce its own verdict, and the clean run
must reconcile. Faults: ``send_rewrite`` refills the send buffer after its fingerprint was taken and
before the collective reads it (the stale-content illusion); ``placement`` makes the collective
read the send buffer one row off (a shard-boundary error; the buffer itself is untouched);
``packing`` packs every shard's rows in reverse order (a layout bug the transport moves faithfully).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from ditpar.comm.audit import A2AAudit
from ditpar.errors import InputError

FAULTS = ("none", "send_rewrite", "placement", "packing")
WIDTH = 8  # elements per row


def layouts(world: int) -> list[tuple[str, list[int]]]:
    """The world communicator, plus two halves from 4 ranks on (same call numbers, other comm)."""
    out = [("world", list(range(world)))]
    if world >= 4 and world % 2 == 0:
        h = world // 2
        out += [("half0", list(range(h))), ("half1", list(range(h, world)))]
    return out


def block_matrix(seed: int, comm: int, call: int, chunk: int, n: int) -> list[list[int]]:
    """Rows rank s sends to rank d; about a quarter empty. Identical on every rank."""
    rng = random.Random(f"{seed}/{comm}/{call}/{chunk}")
    return [[0 if rng.random() < 0.25 else rng.randint(1, 5) for _ in range(n)] for _ in range(n)]


def run_probe(ctx: Any, out_dir: str, faults: list[str], calls: int, chunks: int, seed: int) -> list[str]:
    """Write <out_dir>/<fault>/rank<global rank>.log for each fault; return the folders."""
    import torch
    import torch.distributed as dist

    from ditpar.comm.dist import new_group, peer_failure

    unknown = [f for f in faults if f not in FAULTS]
    if unknown:
        raise InputError(f"--faults: unknown fault(s) {unknown}; known: {', '.join(FAULTS)}")
    comms = []
    for ci, (name, ranks) in enumerate(layouts(ctx.world)):
        g = new_group(ctx, ranks)  # every rank creates every group, in the same order
        if ctx.rank in ranks:
            comms.append((ci, name, ranks, g))
    folders = []
    for fault in faults:
        folder = Path(out_dir) / fault
        folder.mkdir(parents=True, exist_ok=True)
        log = folder / f"rank{ctx.rank}.log"
        log.write_text("", encoding="utf-8")
        folders.append(str(folder))
        for ci, name, ranks, g in comms:
            n, me = len(ranks), ranks.index(ctx.rank)
            audit = A2AAudit(str(log), name, me, n, global_rank=ctx.rank, enabled=True)
            for call in range(calls):
                for chunk in range(chunks):
                    m = block_matrix(seed, ci, call, chunk, n)
                    send_splits, recv_splits = m[me], [m[s][me] for s in range(n)]
                    gen = torch.Generator().manual_seed(hash((seed, ci, call, chunk, me)) & 0x7FFFFFFF)
                    shards = [torch.randn(rows, WIDTH, generator=gen).to(ctx.device) for rows in send_splits]
                    packed = [s.flip(0) if fault == "packing" else s for s in shards]
                    send = torch.cat(packed)
                    what = f"a2a_audit probe {fault} {name} call {call} chunk {chunk}"
                    try:
                        ctx.watchdog.pet(what)
                        rec = audit.begin(send, send_splits, call, chunk, intended=shards)
                        if fault == "send_rewrite":
                            send.add_(1.0)  # refilled before the transport read it
                        dispatched = send.roll(1, 0) if fault == "placement" and send.shape[0] else send
                        recv = send.new_empty((sum(recv_splits), WIDTH))
                        work = dist.all_to_all_single(recv, dispatched, recv_splits, send_splits,
                                                      group=g, async_op=True)
                        work.wait()
                        rec.received(recv, recv_splits)  # the copy the consumer reads
                        rec.end()
                    except InputError:
                        raise
                    except Exception as exc:
                        raise peer_failure(ctx, what, exc) from None
        dist.barrier()
    return folders
