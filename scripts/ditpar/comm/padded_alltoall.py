"""Padded equal-split all-to-all that replaces an uneven one (``all_to_all_single`` with split sizes).

Every block is padded to S_PAD rows (a multiple of ``multiple`` rows, 128 by default, from the
global maximum block), exchanged with the equal-split all-to-all (``hcom_alltoall`` on Ascend
instead of ``hcom_alltoallv``), and sliced back to its true length. S_PAD must be identical on all
ranks of the group; :func:`global_s_pad` derives it with one small MAX all-reduce.
Packing and unpacking are one ``index_copy_`` / ``index_select`` each, not one copy per block.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ditpar.errors import InputError

DEFAULT_MULTIPLE = 128


def round_up(value: int, multiple: int) -> int:
    """Smallest multiple of ``multiple`` that is >= value."""
    if multiple < 1:
        raise InputError(f"multiple {multiple}: expected a positive number of rows")
    return -(-int(value) // multiple) * multiple


def s_pad_for(max_block: int, multiple: int = DEFAULT_MULTIPLE) -> int:
    """S_PAD from the global maximum block size in rows (0 when every block is empty)."""
    if max_block < 0:
        raise InputError(f"max block {max_block}: expected >= 0 rows")
    return round_up(max_block, multiple)


def _check_splits(name: str, splits: Sequence[int], n: int) -> list[int]:
    values = [int(s) for s in splits]
    if len(values) != n:
        raise InputError(f"{name}: {len(values)} split sizes for a group of {n} ranks")
    if any(v < 0 for v in values):
        raise InputError(f"{name}: negative split size in {values}")
    return values


def global_s_pad(input_splits: Sequence[int], output_splits: Sequence[int], group: Any = None,
                 multiple: int = DEFAULT_MULTIPLE, device: Any = None) -> int:
    """S_PAD agreed by all ranks: one MAX all-reduce of the local largest block (sent or received)."""
    import torch
    import torch.distributed as dist

    local = max([0, *input_splits, *output_splits])
    t = torch.tensor([local], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return s_pad_for(int(t.item()), multiple)


def _positions(splits: Sequence[int], s_pad: int, device: Any) -> Any:
    """Row index in the padded buffer of every real row, in block order."""
    import torch

    counts = torch.tensor(list(splits), dtype=torch.int64, device=device)
    n, total = counts.numel(), int(sum(splits))
    block = torch.repeat_interleave(torch.arange(n, device=device), counts)
    starts = torch.cumsum(counts, 0) - counts
    return block * s_pad + torch.arange(total, device=device) - starts[block]


@dataclass
class PendingPad:
    """An in-flight padded exchange; ``wait()`` finishes it and returns the unpadded output."""

    work: Any
    recv: Any
    out_index: Any
    rows_out: int
    template: Any

    def wait(self) -> Any:
        if self.work is not None:
            self.work.wait()
        if self.recv is None:
            return self.template.new_empty((self.rows_out, *self.template.shape[1:]))
        return self.recv.index_select(0, self.out_index)


def start_padded_all_to_all(inp: Any, input_splits: Sequence[int], output_splits: Sequence[int],
                            s_pad: int, group: Any = None, async_op: bool = True) -> PendingPad:
    """Pack, launch the equal-split all-to-all, and return a handle that unpacks on wait()."""
    import torch.distributed as dist

    n = dist.get_world_size(group)
    ins = _check_splits("input_split_sizes", input_splits, n)
    outs = _check_splits("output_split_sizes", output_splits, n)
    if sum(ins) != inp.shape[0]:
        raise InputError(f"input_split_sizes sum to {sum(ins)} rows; the input has {inp.shape[0]}")
    largest = max([0, *ins, *outs])
    if s_pad < largest:
        raise InputError(f"S_PAD {s_pad} is smaller than the largest block ({largest} rows)")
    rows_out = sum(outs)
    if s_pad == 0:  # every block on every rank is empty: nothing to move
        return PendingPad(None, None, None, rows_out, inp)
    tail = tuple(inp.shape[1:])
    send = inp.new_zeros((n * s_pad, *tail))
    if inp.shape[0]:
        send.index_copy_(0, _positions(ins, s_pad, inp.device), inp)
    recv = inp.new_empty((n * s_pad, *tail))
    work = dist.all_to_all_single(recv, send, group=group, async_op=async_op)
    return PendingPad(work, recv, _positions(outs, s_pad, inp.device), rows_out, inp)


def padded_all_to_all(inp: Any, input_splits: Sequence[int], output_splits: Sequence[int],
                      group: Any = None, s_pad: int | None = None,
                      multiple: int = DEFAULT_MULTIPLE) -> Any:
    """Drop-in for ``all_to_all_single(out, inp, output_splits, input_splits)``; returns out."""
    if s_pad is None:
        s_pad = global_s_pad(input_splits, output_splits, group, multiple, inp.device)
    return start_padded_all_to_all(inp, input_splits, output_splits, s_pad, group,
                                   async_op=False).wait()


def uneven_all_to_all(inp: Any, input_splits: Sequence[int], output_splits: Sequence[int],
                      group: Any = None) -> Any:
    """The path being replaced: ``all_to_all_single`` with split sizes (``hcom_alltoallv``)."""
    import torch.distributed as dist

    out = inp.new_empty((int(sum(output_splits)), *inp.shape[1:]))
    dist.all_to_all_single(out, inp, list(map(int, output_splits)), list(map(int, input_splits)),
                           group=group)
    return out


def parse_split_matrix(text: str) -> list[list[int]]:
    """'3,0,5;2,2,2;1,1,0' -> rows are senders, columns receivers (block sizes in rows)."""
    rows = [r for r in text.replace(" ", "").split(";") if r]
    if not rows:
        raise InputError("--splits: expected rows separated by ';', e.g. '3,0;2,5'")
    matrix = []
    for i, row in enumerate(rows):
        try:
            values = [int(v) for v in row.split(",")]
        except ValueError:
            raise InputError(f"--splits row {i}: {row!r} is not a comma-separated list of integers") from None
        if any(v < 0 for v in values):
            raise InputError(f"--splits row {i}: negative block size in {values}")
        matrix.append(values)
    n = len(matrix)
    for i, row in enumerate(matrix):
        if len(row) != n:
            raise InputError(f"--splits row {i}: {len(row)} entries, expected {n} (one per rank)")
    return matrix


def pad_plan(matrix: Sequence[Sequence[int]], row_bytes: int, multiple: int = DEFAULT_MULTIPLE) -> dict:
    """Wire cost of replacing the uneven exchange given by a split matrix with the padded one."""
    if row_bytes < 1:
        raise InputError(f"--row-bytes {row_bytes}: expected a positive number of bytes")
    n = len(matrix)
    largest = max((v for row in matrix for v in row), default=0)
    s_pad = s_pad_for(largest, multiple)
    ranks = []
    for r in range(n):
        sent = sum(matrix[r])
        received = sum(matrix[s][r] for s in range(n))
        ranks.append({
            "rank": r,
            "send_rows": sent,
            "recv_rows": received,
            "payload_send_bytes": sent * row_bytes,
            "wire_send_bytes": n * s_pad * row_bytes,
        })
    payload = sum(r["payload_send_bytes"] for r in ranks)
    wire = n * n * s_pad * row_bytes
    return {
        "ranks_in_group": n,
        "max_block_rows": largest,
        "multiple": multiple,
        "s_pad": s_pad,
        "row_bytes": row_bytes,
        "payload_bytes": payload,
        "wire_bytes": wire,
        "padding_overhead": (wire / payload - 1.0) if payload else None,
        "per_rank": ranks,
    }
