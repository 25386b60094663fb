"""Bus-bandwidth formulas and size bookkeeping of comm_bench, against hand values from nccl-tests.

Hand values follow nccl-tests src/*.cu (NVIDIA/nccl-tests@a0b82b22): the op's size is the largest
per-rank buffer after rounding the element count down to a multiple of nranks where the op splits
per rank; algbw = size / time; busbw = algbw x factor. No processes are started here.
"""

from __future__ import annotations

import math

import pytest
from ditpar.comm import bench
from ditpar.errors import InputError


def plan(op: str, size: int, n: int, elem: int = 4, row_elems: int = 64):
    return bench.OPS[op].plan(size, n, elem, row_elems)


def test_bandwidths_hand_values():
    # 1e9 bytes in one second is 1 GB/s (nccl-tests divides by 1.0E9)
    alg, bus = bench.bandwidths(10**9, 1e6, 2 * 7 / 8)
    assert alg == pytest.approx(1.0)
    assert bus == pytest.approx(1.75)
    # 64 MiB all_to_all on 8 ranks in 2500 us: 67108864 / 2.5e-3 / 1e9 = 26.8435456 GB/s; x 7/8
    alg, bus = bench.bandwidths(64 * 2**20, 2500.0, 7 / 8)
    assert alg == pytest.approx(26.8435456)
    assert bus == pytest.approx(23.488102400)
    assert all(math.isnan(v) for v in bench.bandwidths(1024, 0.0, 1.0))


@pytest.mark.parametrize("op,n,factor", [
    ("all_reduce", 2, 1.0), ("all_reduce", 4, 1.5), ("all_reduce", 8, 1.75),
    ("all_gather", 4, 0.75), ("reduce_scatter", 8, 0.875), ("all_to_all", 2, 0.5),
    ("broadcast", 8, 1.0), ("sendrecv", 2, 1.0),
])
def test_standard_bus_factors(op, n, factor):
    assert plan(op, 1 << 20, n).bus_factor == pytest.approx(factor)


def test_sizes_round_like_nccl_tests():
    # all_gather, 3 ranks, 1000 B of float32: 250 elements -> 83 per rank -> size 83*4*3 = 996 B
    p = plan("all_gather", 1000, 3)
    assert (p.count, p.size_bytes) == (83, 996)
    # reduce_scatter and all_to_all use the same per-rank rounding
    assert plan("reduce_scatter", 1000, 3).size_bytes == 996
    assert plan("all_to_all", 1000, 3).size_bytes == 996
    # all_reduce / broadcast / sendrecv move the whole count: 1002 B -> 250 floats -> 1000 B
    for op in ("all_reduce", "broadcast", "sendrecv"):
        p = plan(op, 1002, 3)
        assert (p.count, p.size_bytes) == (250, 1000)
    # bfloat16 halves the element size, not the byte size
    assert plan("all_reduce", 4096, 2, elem=2).count == 2048


def test_uneven_split_pattern_and_factor():
    # weights [1, 2, 0, 1] over the peer offset k = 0..3 (self first); 12 rows -> 3, 6, 0, 3
    assert bench.uneven_blocks(12, 4) == [3, 6, 0, 3]
    # two ranks: weights [1, 2] -> 9 rows = 3 to self, 6 to the peer
    assert bench.uneven_blocks(9, 2) == [3, 6]
    # 1 MiB of float32 rows of 64 elements = 4096 rows on 4 ranks -> blocks 1024, 2048, 0, 1024
    p = plan("all_to_all_uneven", 1 << 20, 4)
    assert p.extra["blocks"] == [1024, 2048, 0, 1024]
    assert p.size_bytes == 1 << 20 and p.wire_bytes == 1 << 20
    assert p.bus_factor == pytest.approx(3072 / 4096)  # bytes that leave the rank
    # the padded op moves n * S_PAD rows: S_PAD = 2048 (already a multiple of 128)
    q = plan("all_to_all_padded", 1 << 20, 4)
    assert q.extra["s_pad"] == 2048
    assert q.wire_bytes == 4 * 2048 * 64 * 4
    assert q.size_bytes == p.size_bytes and q.bus_factor == p.bus_factor


def test_uneven_blocks_are_circulant_so_every_rank_sends_and_receives_the_same():
    n, rows = 5, 1003
    blocks = bench.uneven_blocks(rows, n)
    sends = [sum(blocks[(d - r) % n] for d in range(n)) for r in range(n)]
    recvs = [sum(blocks[(r - s) % n] for s in range(n)) for r in range(n)]
    assert sends == recvs == [rows] * n
    assert 0 in blocks


def test_apportion_largest_remainder():
    assert bench.apportion(10, [1, 2, 0, 1]) == [3, 5, 0, 2]
    assert sum(bench.apportion(7, [1, 1, 1])) == 7


@pytest.mark.parametrize("text,value", [("64K", 65536), ("1M", 1 << 20), ("2G", 2 << 30),
                                        ("1.5K", 1536), ("4096", 4096), ("8MiB", 8 << 20)])
def test_parse_size(text, value):
    assert bench.parse_size(text) == value


@pytest.mark.parametrize("text", ["12Q", "abc", "-1", "0", "1.3", ""])
def test_parse_size_rejects(text):
    with pytest.raises(InputError):
        bench.parse_size(text)


def test_size_sweep():
    assert bench.size_sweep(1024, 8192, 2) == [1024, 2048, 4096, 8192]
    assert bench.size_sweep(1024, 5000, 4) == [1024, 4096]
    with pytest.raises(InputError):
        bench.size_sweep(2048, 1024, 2)
    with pytest.raises(InputError):
        bench.size_sweep(1024, 2048, 1)


def test_parse_groups_and_ops():
    assert bench.parse_groups("0,1;0,4", 8) == [[0, 1], [0, 4]]
    assert bench.parse_groups(None, 3) == [[0, 1, 2]]
    for bad in ("0,8", "0,0", "a,b", ";"):
        with pytest.raises(InputError):
            bench.parse_groups(bad, 8)
    assert [s.name for s in bench.parse_ops("sendrecv,all_reduce")] == ["sendrecv", "all_reduce"]
    assert len(bench.parse_ops("all")) == 8
    with pytest.raises(InputError, match="unknown op"):
        bench.parse_ops("all_reduce,alltoallv")
