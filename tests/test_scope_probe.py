"""Scope probe end to end: two gloo ranks run a tiny Ulysses attention, sharded and deliberately not.

The worker below is a real Ulysses layer (sequence split over ranks, all-to-all to split heads,
attention, all-to-all back). The un-sharded arm is the silent failure the probe exists for: every rank
gets the whole sequence and skips the exchange, the output is still right, and only the recorded
shapes show that nothing was split. A single-process run gives the baseline for the two-sided check.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import SCRIPTS, run_script

pytest.importorskip("torch")

SEQ, HEADS, HEAD_DIM, BATCH = 12, 4, 8, 1
HIDDEN = HEADS * HEAD_DIM

WORKER = textwrap.dedent(
    f"""
    import sys
    sys.path.insert(0, {str(SCRIPTS)!r})
    import torch
    import torch.distributed as dist
    from ditpar.scope.recorder import ScopeRecorder

    SEQ, HEADS, HEAD_DIM, BATCH = {SEQ}, {HEADS}, {HEAD_DIM}, {BATCH}
    HIDDEN = HEADS * HEAD_DIM
    rank, world, port, mode, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]

    class Core(torch.nn.Module):
        def forward(self, q, k, v):  # (B, S, H, D)
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
            return torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2)

    def a2a(x, scatter_dim, gather_dim, world):
        parts = [p.contiguous() for p in x.chunk(world, dim=scatter_dim)]
        got = [torch.empty_like(p) for p in parts]
        dist.all_to_all(got, parts)
        return torch.cat(got, dim=gather_dim)

    class Attn(torch.nn.Module):
        def __init__(self, shard):
            super().__init__()
            self.qkv = torch.nn.Linear(HIDDEN, 3 * HIDDEN, bias=False)
            self.core = Core()
            self.shard = shard

        def forward(self, x):  # (B, S_local, HIDDEN)
            b, s, _ = x.shape
            q, k, v = (t.reshape(b, s, HEADS, HEAD_DIM) for t in self.qkv(x).chunk(3, dim=-1))
            if self.shard:
                # Ulysses: sequence-split, all heads -> full sequence, heads split
                q, k, v = (a2a(t, 2, 1, world) for t in (q, k, v))
            o = self.core(q, k, v)
            if self.shard:
                o = a2a(o, 1, 2, world)
            return o.reshape(b, o.shape[1], HIDDEN)

    class Model(torch.nn.Module):
        def __init__(self, shard):
            super().__init__()
            self.blocks = torch.nn.ModuleList([Attn(shard) for _ in range(2)])

        def forward(self, x):
            for blk in self.blocks:
                x = x + blk(x)
            return x

    if world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{{port}}", rank=rank, world_size=world)
    torch.manual_seed(0)
    shard = mode == "sharded"
    model = Model(shard)
    x = torch.randn(BATCH, SEQ, HIDDEN)
    local = x.chunk(world, dim=1)[rank] if shard else x
    with ScopeRecorder(out, rank=rank, world_size=world) as rec:
        rec.attach(model, names=r"blocks\\.\\d+$", stage="input", layout="BSD")
        rec.attach(model, types=[Core], stage="core", layout="BSHD")
        with torch.no_grad():
            y = model(local)
    if shard and world > 1:
        parts = [torch.empty_like(y) for _ in range(world)]
        dist.all_gather(parts, y)
        y = torch.cat(parts, dim=1)
    if rank == 0:
        torch.save(y, out + "/y.pt")
    if world > 1:
        dist.destroy_process_group()
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(tmp: Path, mode: str, world: int) -> Path:
    out = tmp / f"{mode}-{world}"
    out.mkdir()
    worker = tmp / "worker.py"
    worker.write_text(WORKER)
    port = str(_free_port())
    env = {"GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    procs = [subprocess.Popen([sys.executable, str(worker), str(r), str(world), port, mode, str(out)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for r in range(world)]
    for p in procs:
        try:
            _, err = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"worker ({mode}, world {world}) hung for 120 s")
        assert p.returncode == 0, f"worker ({mode}) failed:\n{err[-2000:]}"
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("scope")
    return {"sharded": _launch(tmp, "sharded", 2), "unsharded": _launch(tmp, "unsharded", 2),
            "baseline": _launch(tmp, "baseline", 1)}


def _probe(*args: str, check: int) -> dict:
    proc = run_script("scope_probe.py", *args, "--json", check=check)
    return json.loads(proc.stdout)


def test_harness_is_a_real_ulysses_layer(runs):
    """Sharded and un-sharded runs give the same output: the silent failure is invisible in results."""
    import torch

    a = torch.load(runs["sharded"] / "y.pt")
    b = torch.load(runs["unsharded"] / "y.pt")
    c = torch.load(runs["baseline"] / "y.pt")
    assert torch.allclose(a, b, atol=1e-5) and torch.allclose(b, c, atol=1e-5)


def test_sharded_run_passes_with_full_sizes(runs):
    doc = _probe(str(runs["sharded"]), "--ulysses", "2", "--full-seq", str(SEQ), "--heads", str(HEADS), check=0)
    assert doc["schema"] == "dit-parallel-opt/scope_probe/v1"
    assert doc["verdict"] == "sharded" and doc["ranks_seen"] == [0, 1] and doc["missing_ranks"] == []
    by_stage = {(r["rank"], r["stage"], r["name"]): r for r in doc["rows"]}
    # 2 blocks x (input + core) on each of 2 ranks
    assert len(by_stage) == 8
    inp = by_stage[(1, "input", "blocks.0")]
    assert inp["seq_q"] == SEQ // 2 == inp["expected_seq_q"]
    core = by_stage[(0, "core", "blocks.1.core")]
    assert (core["seq_q"], core["heads_q"], core["seq_kv"], core["heads_kv"]) == (SEQ, HEADS // 2, SEQ, HEADS // 2)


def test_unsharded_run_fails(runs):
    doc = _probe(str(runs["unsharded"]), "--ulysses", "2", "--full-seq", str(SEQ), "--heads", str(HEADS), check=1)
    assert doc["verdict"] == "not-sharded"
    statuses = {r["status"] for r in doc["rows"]}
    assert statuses == {"not-sharded"}
    inp = next(r for r in doc["rows"] if r["stage"] == "input")
    assert (inp["seq_q"], inp["expected_seq_q"]) == (SEQ, SEQ // 2)


def test_two_sided_comparison_with_baseline(runs):
    ok = _probe(str(runs["sharded"]), "--ulysses", "2", "--baseline", str(runs["baseline"]), check=0)
    assert ok["verdict"] == "sharded" and ok["baseline_sites"] == 4
    bad = _probe(str(runs["unsharded"]), "--ulysses", "2", "--baseline", str(runs["baseline"]), check=1)
    assert bad["verdict"] == "not-sharded"


def test_wrong_degree_is_a_mismatch(runs):
    doc = _probe(str(runs["sharded"]), "--ulysses", "4", "--ranks", "4", "--full-seq", str(SEQ),
                 "--heads", str(HEADS), check=1)
    assert doc["verdict"] == "mismatch"


def test_missing_rank_is_reported(runs, tmp_path):
    only0 = tmp_path / "only0"
    only0.mkdir()
    (only0 / "scope-rank0.jsonl").write_text((runs["sharded"] / "scope-rank0.jsonl").read_text())
    doc = _probe(str(only0), "--ulysses", "2", "--full-seq", str(SEQ), "--heads", str(HEADS), check=1)
    assert doc["verdict"] == "incomplete" and doc["missing_ranks"] == [1]


def test_no_records_is_no_evidence(tmp_path):
    (tmp_path / "scope-rank0.jsonl").write_text("")
    proc = run_script("scope_probe.py", str(tmp_path), "--ulysses", "2", "--full-seq", "8", check=2)
    assert "no scope records" in proc.stderr


def test_bad_line_names_file_and_line(tmp_path):
    (tmp_path / "scope-rank0.jsonl").write_text('{"schema": "dit-parallel-opt/scope/v1"}\n')
    proc = run_script("scope_probe.py", str(tmp_path), "--ulysses", "2", "--full-seq", "8", check=2)
    assert "scope-rank0.jsonl:1" in proc.stderr and "missing keys" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_record_function_is_off_without_env(monkeypatch, tmp_path):
    from ditpar.scope import recorder

    monkeypatch.delenv(recorder.ENV_DIR, raising=False)
    monkeypatch.setattr(recorder, "_default", None)
    assert recorder.record("x", _Shape((1, 4, 2, 8))) is False
    monkeypatch.setenv(recorder.ENV_DIR, str(tmp_path))
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert recorder.record("x", _Shape((1, 4, 2, 8))) is True
    recorder.default_recorder().close()
    line = json.loads((tmp_path / "scope-rank3.jsonl").read_text())
    assert (line["rank"], line["world_size"], line["q"], line["k"]) == (3, 4, [1, 4, 2, 8], None)


class _Shape:
    """Anything with .shape and .dtype records; torch is not needed to write a record."""

    def __init__(self, shape):
        self.shape, self.dtype = shape, "bfloat16"


# ---------------------------------------------------------------------------------------------
# expected per-rank sizes for other plans, by hand (no torch needed)


def test_expected_sizes_by_hand():
    from ditpar.scope.check import Full, Plan, expected_sizes

    wan = Full(seq=75600, heads=40)  # Wan2.1-14B at 1280x720x81: 21 x 45 x 80 tokens, 40 heads
    # Ulysses 8: input 75600/8 = 9450 rows; core: full sequence, 40/8 = 5 heads
    assert expected_sizes("input", wan, Plan(ulysses=8), None, 0)["seq_q"] == 9450
    assert expected_sizes("core", wan, Plan(ulysses=8), None, 0) == {
        "seq_q": 75600, "heads_q": 5, "seq_kv": 75600, "heads_kv": 5}
    # Ulysses 4 x ring 2: input 75600/8; core q and one K/V block = 75600/2 = 37800, 40/4 = 10 heads
    assert expected_sizes("core", wan, Plan(ulysses=4, ring=2), None, 0) == {
        "seq_q": 37800, "heads_q": 10, "seq_kv": 37800, "heads_kv": 10}
    # Ulysses 4 x K/V all-gather 2: q keeps 75600/2, K/V gathered to the full 75600
    assert expected_sizes("core", wan, Plan(ulysses=4, kv_allgather=2), None, 0) == {
        "seq_q": 37800, "heads_q": 10, "seq_kv": 75600, "heads_kv": 10}
    # TP 2 x Ulysses 2: heads 40 / (2*2) = 10 at core; at the input TP already splits heads: 20
    tp = expected_sizes("input", Full(seq=75600, heads=40), Plan(ulysses=2, tp=2), None, 0)
    assert (tp["seq_q"], tp["heads_q"]) == (37800, 20)
    # GQA 56 query / 8 K/V heads, Ulysses 8: 7 and 1 heads per rank
    gqa = expected_sizes("core", Full(seq=4096, heads=56, kv_heads=8), Plan(ulysses=8), None, 0)
    assert (gqa["heads_q"], gqa["heads_kv"]) == (7, 1)
    # sparse alignment: pad 109120 tokens to a multiple of 8 x 128 = 1024 -> 109568; 109568 / 8 = 13696
    assert expected_sizes("input", Full(seq=109120), Plan(ulysses=8), 1024, 0)["seq_q"] == 13696
    # default padding = the degree: ceil(32761 / 8) = 4096 rows per rank
    assert expected_sizes("input", Full(seq=32761), Plan(ulysses=8), None, 0)["seq_q"] == 4096
    # 512 text tokens every rank keeps whole: (4096 image tokens / 4) + 512
    assert expected_sizes("input", Full(seq=4096 + 512), Plan(ulysses=4), None, 512)["seq_q"] == 1536


def test_bad_plans_are_input_errors():
    from ditpar.errors import InputError
    from ditpar.scope.check import Full, Plan, expected_sizes

    with pytest.raises(InputError, match="alternatives"):
        Plan(ring=2, kv_allgather=2)
    with pytest.raises(InputError, match="nothing is sharded"):
        Plan()
    with pytest.raises(InputError, match="not divisible by the head degree"):
        expected_sizes("core", Full(seq=32760, heads=12), Plan(ulysses=8), None, 0)


def test_two_recorders_on_one_folder_share_the_file(tmp_path):
    from ditpar.scope.recorder import ScopeRecorder

    a = ScopeRecorder(tmp_path, rank=0, world_size=2)
    b = ScopeRecorder(tmp_path, rank=0, world_size=2)
    a.record("hooked", _Shape((1, 6, 32)), stage="input", layout="BSD")
    b.record("explicit", _Shape((1, 12, 2, 8)), stage="core")
    a.close()
    b.record("explicit", _Shape((1, 12, 2, 8)), stage="core")
    b.close()
    names = [json.loads(line)["name"] for line in (tmp_path / "scope-rank0.jsonl").read_text().splitlines()]
    assert names == ["hooked", "explicit", "explicit"]


# ---------------------------------------------------------------------------------------------
# issue 14 item 7: an uneven split (no padding) as torch.tensor_split makes it is a correct split


def _uneven_records(folder: Path, input_lengths: list[int], core_len: int, heads: int = 40) -> Path:
    folder.mkdir()
    world = len(input_lengths)
    for rank, length in enumerate(input_lengths):
        core = [1, core_len, heads // world, 128]
        lines = [{"schema": "dit-parallel-opt/scope/v1", "rank": rank, "world_size": world, "name": "attn",
                  "stage": "input", "layout": "BSHD", "q": [1, length, heads, 128], "k": None, "v": None},
                 {"schema": "dit-parallel-opt/scope/v1", "rank": rank, "world_size": world, "name": "attn.core",
                  "stage": "core", "layout": "BSHD", "q": core, "k": core, "v": core}]
        (folder / f"scope-rank{rank}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return folder


def test_uneven_split_of_32761_tokens_on_4_ranks_is_sharded(tmp_path):
    # 32761 = 4 x 8190 + 1: torch.tensor_split gives 8191, 8190, 8190, 8190; Ulysses core gathers all 32761
    runs = _uneven_records(tmp_path / "u", [8191, 8190, 8190, 8190], 32761)
    for extra in ([], ["--pad-multiple", "1"]):
        doc = _probe(str(runs), "--ulysses", "4", "--full-seq", "32761", "--heads", "40", *extra, check=0)
        assert doc["verdict"] == "sharded", extra
        checks = {c["name"]: c["status"] for c in doc["checks"]}
        assert checks["sequence shares add up"] == "pass"
    assert doc["split"] == "uneven"
    row = next(r for r in doc["rows"] if r["rank"] == 0 and r["stage"] == "input")
    assert row["accepted_seq_q"] == [[8190, 8191]] and row["expected_seq_q"] is None
    core = next(r for r in doc["rows"] if r["rank"] == 3 and r["stage"] == "core")
    assert core["accepted_seq_q"] == [[32761, 32761]] and core["expected_seq_q"] == 32761
    text = run_script("scope_probe.py", str(runs), "--ulysses", "4", "--full-seq", "32761", "--heads", "40",
                      check=0).stdout
    assert "8190-8191" in text and "NOT-SHARDED" not in text


def test_uneven_shares_that_do_not_add_up_are_a_mismatch(tmp_path):
    # each share is floor or ceil of 32761/4, but 8191 + 8191 + 8190 + 8190 = 32762: one token twice
    runs = _uneven_records(tmp_path / "u", [8191, 8191, 8190, 8190], 32761)
    doc = _probe(str(runs), "--ulysses", "4", "--full-seq", "32761", "--heads", "40", check=1)
    assert doc["verdict"] == "mismatch"
    shares = next(c for c in doc["checks"] if c["name"] == "sequence shares add up")
    assert shares["status"] == "fail" and "sum to 32762, expected 32761" in shares["detail"]
    # every rank holding the whole sequence is still caught
    full = _uneven_records(tmp_path / "f", [32761] * 4, 32761 * 4)
    assert _probe(str(full), "--ulysses", "4", "--full-seq", "32761", "--heads", "40", check=1)["verdict"] == "not-sharded"


def test_accepted_ranges_by_hand():
    from ditpar.scope.check import Full, Plan, accepted_sizes

    # 10 tokens, Ulysses 2 x ring 2: 4 fine shards of 3,3,2,2; a core rank holds 2 of them -> 4..6 tokens;
    # padded to 12 it holds 6, so both give 4-6. K/V: ring only, same. Input: 2 or 3 (padded: 3).
    acc = accepted_sizes("core", Full(seq=10, heads=4), Plan(ulysses=2, ring=2), None, 0)
    assert acc["seq_q"] == [(4, 6)] and acc["heads_q"] == [(2, 2)]
    assert accepted_sizes("input", Full(seq=10), Plan(ulysses=2, ring=2), None, 0)["seq_q"] == [(2, 3)]
    # no padding allowed: --pad-multiple 1; explicit padding 8: 16 / 4 = 4 per rank
    assert accepted_sizes("input", Full(seq=10), Plan(ulysses=2, ring=2), 1, 0)["seq_q"] == [(2, 3)]
    assert accepted_sizes("input", Full(seq=10), Plan(ulysses=2, ring=2), 8, 0)["seq_q"] == [(4, 4)]
    # Ulysses 4 alone on 32761: the core gathers everything -> exactly 32761, or 32764 when padded
    assert accepted_sizes("core", Full(seq=32761, heads=40), Plan(ulysses=4), None, 0)["seq_q"] == \
        [(32761, 32761), (32764, 32764)]
