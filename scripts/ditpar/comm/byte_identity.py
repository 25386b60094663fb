"""Proof that the padded all-to-all moves the same bytes as the uneven one, on random splits.

Every rank rebuilds every rank's input from a shared seed, so besides comparing the two paths
byte for byte, each output is also compared with the expected blocks built locally (an
independent check of the uneven path itself). Inputs are random bit patterns (NaN patterns
included), compared as bytes, never as floats.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

from ditpar.comm import padded_alltoall
from ditpar.errors import InputError

DTYPES = ("float32", "bfloat16", "float16", "int8", "int64")
TAILS = ((), (3,), (2, 5), (64,))
#: spellings accepted by --dtype -> torch dtype name
DTYPE_NAMES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16",
               "half": "float16", "fp32": "float32", "float32": "float32", "float": "float32",
               "int8": "int8", "int64": "int64"}
#: bytes per element of each dtype name (for the plan, without torch)
ITEM_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "int8": 1, "int64": 8}


def parse_dtype(text: str) -> str:
    """--dtype value -> torch dtype name (bf16, fp16, fp32 and the full names; int8, int64)."""
    name = DTYPE_NAMES.get(text.strip().lower())
    if name is None:
        raise InputError(f"--dtype {text!r}: expected one of {sorted(DTYPE_NAMES)}")
    return name


def parse_row_shape(text: str) -> tuple[int, ...]:
    """--row-shape '40,128' (heads, head_dim) or '5120' (row width) -> the shape of one row."""
    try:
        dims = tuple(int(v) for v in text.replace(" ", "").split(",") if v)
    except ValueError:
        raise InputError(f"--row-shape {text!r}: expected comma-separated positive integers, e.g. 40,128") from None
    if not dims or any(d < 1 for d in dims):
        raise InputError(f"--row-shape {text!r}: expected comma-separated positive integers, e.g. 40,128")
    return dims


def random_matrix(rng: random.Random, n: int, max_rows: int) -> list[list[int]]:
    """Block sizes: about a third of the blocks empty, the rest 1..max_rows rows."""
    return [[0 if rng.random() < 0.35 else rng.randint(1, max_rows) for _ in range(n)] for _ in range(n)]


def special_matrices(n: int) -> list[list[list[int]]]:
    """All empty; rank 0 sends nothing; the last rank receives nothing; one large block; all equal."""
    cases = [[[0] * n for _ in range(n)]]
    cases.append([[0] * n] + [[(i + j) % 4 + 1 for j in range(n)] for i in range(1, n)])
    cases.append([[0 if j == n - 1 else 3 for j in range(n)] for _ in range(n)])
    big = [[1] * n for _ in range(n)]
    big[n - 1][0] = 300  # crosses several multiples of 128
    cases.append(big)
    cases.append([[128] * n for _ in range(n)])
    return cases


def rank_input(seed: int, case: int, src: int, rows: int, tail: Sequence[int], dtype_name: str) -> Any:
    """Random bytes of rank src's input in one case, identical wherever it is rebuilt."""
    import torch

    dtype = getattr(torch, dtype_name)
    item = torch.empty((), dtype=dtype).element_size()
    g = torch.Generator().manual_seed(seed * 1_000_003 + case * 1009 + src)
    raw = torch.randint(0, 256, (rows, *tail, item), generator=g, dtype=torch.uint8)
    return raw.view(dtype).reshape(rows, *tail)


def expected_output(seed: int, case: int, matrix: list[list[int]], me: int, tail, dtype_name: str):
    """Concatenation, over sources s, of the block s sends to me."""
    import torch

    pieces = []
    for s, row in enumerate(matrix):
        full = rank_input(seed, case, s, sum(row), tail, dtype_name)
        start = sum(row[:me])
        pieces.append(full[start:start + row[me]])
    return torch.cat(pieces) if pieces else None


def as_bytes(t: Any) -> Any:
    return t.contiguous().view(-1).view(__import__("torch").uint8)


def run_check(ctx: Any, trials: int, seed: int, multiple: int, max_rows: int,
              matrix: list[list[int]] | None = None, dtype: str | None = None,
              row_shape: tuple[int, ...] | None = None) -> list[dict]:
    """Run the cases; return one row per case with identical / matches_expected (all ranks agree).

    Cases cycle through DTYPES and TAILS unless ``dtype`` / ``row_shape`` fix them for every case.
    """
    import torch
    import torch.distributed as dist

    from ditpar.comm.dist import peer_failure

    n, me = ctx.world, ctx.rank
    if matrix is not None and len(matrix) != n:
        raise InputError(f"--splits has {len(matrix)} rows but the launched world has {n} rank(s)")
    rng = random.Random(seed)
    matrices = [matrix] if matrix is not None else special_matrices(n) + [
        random_matrix(rng, n, max_rows) for _ in range(trials)]
    rows = []
    for case, m in enumerate(matrices):
        dtype_name = dtype or DTYPES[case % len(DTYPES)]
        tail = tuple(row_shape) if row_shape is not None else TAILS[case % len(TAILS)]
        send, recv = m[me], [m[s][me] for s in range(n)]
        inp = rank_input(seed, case, me, sum(send), tail, dtype_name).to(ctx.device)
        what = f"a2a_pad check case {case}"
        try:
            ctx.watchdog.pet(what)
            uneven = padded_alltoall.uneven_all_to_all(inp, send, recv)
            # odd cases derive S_PAD with the all-reduce; even ones pass the value every rank can compute
            s_pad = (padded_alltoall.global_s_pad(send, recv, None, multiple, ctx.device) if case % 2
                     else padded_alltoall.s_pad_for(max(v for r in m for v in r), multiple))
            padded = padded_alltoall.padded_all_to_all(inp, send, recv, s_pad=s_pad, multiple=multiple)
            expected = expected_output(seed, case, m, me, tail, dtype_name)
            identical = bool(uneven.shape == padded.shape and torch.equal(as_bytes(uneven), as_bytes(padded)))
            matches = bool(uneven.shape == expected.shape
                           and torch.equal(as_bytes(uneven.cpu()), as_bytes(expected)))
            flags = torch.tensor([0 if identical else 1, 0 if matches else 1], dtype=torch.int64,
                                 device=ctx.device)
            dist.all_reduce(flags)
        except InputError:
            raise
        except Exception as exc:
            raise peer_failure(ctx, what, exc) from None
        bad_identical, bad_expected = (int(v) for v in flags.cpu().tolist())
        item = inp.element_size() * math.prod(tail)  # bytes per row
        payload = sum(v for r in m for v in r) * item
        rows.append({
            "case": case, "dtype": dtype_name, "row_shape": list(tail), "max_block_rows": max(v for r in m for v in r),
            "empty_blocks": sum(1 for r in m for v in r if v == 0), "s_pad": s_pad,
            "s_pad_from": "all_reduce" if case % 2 else "static",
            "payload_bytes": payload, "wire_bytes": n * n * s_pad * item,
            "identical": bad_identical == 0, "matches_expected": bad_expected == 0,
            "ranks_differing": bad_identical,
        })
    return rows
