"""quality_gate.py: plans' images against one device's, in the one-device seed-to-seed band.

Expected values are computed here by hand with numpy (PSNR = 10 log10(MAX^2 / MSE)) on the very arrays written,
and against the noise put in (sigma 2 rounded to integers: PSNR about 10 log10(255^2 / (4 + 1/12)) = 41.93 dB).
"""

from __future__ import annotations

import importlib.util
import json
import math
from itertools import combinations

import numpy as np
import pytest
import quality_synth as qs
from conftest import ROOT, run_script

needs_skimage = pytest.mark.skipif(importlib.util.find_spec("skimage") is None,
                                   reason="scikit-image is not installed (pip install -e '.[quality]')")


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return 10 * math.log10(255.0 ** 2 / mse)


def _gate(folder, *flags, check=None):
    proc = run_script("quality_gate.py", str(folder), "--json", *flags, check=check)
    return proc, (json.loads(proc.stdout) if proc.stdout.strip() else None)


@needs_skimage
def test_psnr_band_and_verdicts_match_the_hand_figures(tmp_path):
    root = qs.write_layout(tmp_path / "q")
    proc, doc = _gate(root, check=1)
    refs = {k: qs.base(k) for k in qs.SEEDS}
    band = max(_psnr(refs[i], refs[j]) for i, j in combinations(qs.SEEDS, 2))
    assert doc["band"]["psnr_db"] == pytest.approx(band, abs=1e-9)
    rows = {(r["plan"], r["seed"]): r for r in doc["seeds"]}
    for plan in ("U4", "R4-fp8", "causal-bug"):
        for k in qs.SEEDS:
            from PIL import Image
            img = np.asarray(Image.open(root / plan / f"seed{k}.png"))
            assert rows[(plan, k)]["psnr_db"] == pytest.approx(_psnr(img, refs[k]), abs=1e-9)
    # the noise put in: sigma 2 and 6, rounded to integers (+1/12 level^2), clipped (a little less)
    for plan, sigma in (("U4", 2.0), ("R4-fp8", 6.0)):
        got = np.mean([rows[(plan, k)]["psnr_db"] for k in qs.SEEDS])
        assert got == pytest.approx(10 * math.log10(255 ** 2 / (sigma ** 2 + 1 / 12)), abs=0.3)
    verdicts = {v["plan"]: v["verdict"] for v in doc["plans"]}
    assert verdicts == {"1dev-rerun": "pass", "R4-fp8": "pass", "U4": "pass", "causal-bug": "fail"}
    assert doc["verdict"] == "fail" and "causal-bug fail" in proc.stderr
    rerun = [r for r in doc["seeds"] if r["plan"] == "1dev-rerun"]
    assert all(r["identical"] and r["psnr_db"] is None and r["ssim"] == 1.0 for r in rerun)
    assert doc["lpips_note"].startswith("LPIPS not computed")


@needs_skimage
def test_without_the_broken_plan_every_plan_passes_and_the_margin_tightens(tmp_path):
    plans = {k: v for k, v in qs.PLANS.items() if k != "causal-bug"}
    root = qs.write_layout(tmp_path / "q", plans)
    _proc, doc = _gate(root, check=0)
    assert doc["verdict"] == "pass"
    u4 = next(v for v in doc["plans"] if v["plan"] == "U4")
    above = u4["above_band_db"]           # 41.9 - 8.5 dB
    assert 33 < above < 34
    r4 = next(v for v in doc["plans"] if v["plan"] == "R4-fp8")["above_band_db"]   # 32.5 - 8.5 dB
    _proc, doc = _gate(root, "--margin-db", str(math.floor(above)), check=1)
    assert {v["plan"]: v["verdict"] for v in doc["plans"]} == {"1dev-rerun": "pass", "U4": "pass", "R4-fp8": "fail"}
    _proc, doc = _gate(root, "--margin-db", str(math.ceil(above)), check=1)
    assert {v["plan"]: v["verdict"] for v in doc["plans"]}["U4"] == "fail"
    _proc, doc = _gate(root, "--margin-db", str(math.floor(r4)), check=0)


@needs_skimage
def test_frames_as_npy_and_as_png_folders(tmp_path):
    root = tmp_path / "v"
    clips = {k: np.stack([qs.base(k), qs.base(k + 3)]) for k in (0, 1)}
    for k, clip in clips.items():
        (root / "1dev").mkdir(parents=True, exist_ok=True)
        np.save(root / "1dev" / f"seed{k}.npy", clip)
        noisy = qs.noisy(clip, 3.0, k)
        for t in range(2):
            qs.save_png(root / "U2" / f"seed{k}" / f"frame{t:03d}.png", noisy[t])
    _proc, doc = _gate(root, "--reference", "1dev", check=0)
    for k, clip in clips.items():
        row = next(r for r in doc["seeds"] if r["seed"] == k)
        assert row["psnr_db"] == pytest.approx(_psnr(qs.noisy(clip, 3.0, k), clip), abs=1e-9)
        assert row["frames_psnr_db"] == pytest.approx([_psnr(qs.noisy(clip, 3.0, k)[t], clip[t]) for t in range(2)],
                                                      abs=1e-9)
    assert doc["verdict"] == "pass"


@needs_skimage
def test_csv_and_table(tmp_path):
    root = qs.write_layout(tmp_path / "q")
    out = tmp_path / "out"
    out.mkdir()
    proc = run_script("quality_gate.py", str(root), "--csv", str(out / "q.csv"), check=1)
    assert "verdict: fail" in proc.stdout and "seed-to-seed band" in proc.stdout
    lines = (out / "q.csv").read_text().splitlines()
    assert lines[0] == "plan,seed,psnr_db,identical,ssim,lpips,within_band" and len(lines) == 1 + 4 * 3


@needs_skimage
@pytest.mark.parametrize("case", ["one-seed", "only-reference", "empty-plan"])
def test_nothing_compared_is_no_evidence(tmp_path, case):
    if case == "one-seed":
        root = qs.write_layout(tmp_path / "q", {"1dev": None, "U4": 2.0}, seeds=(0,))
    elif case == "only-reference":
        root = qs.write_layout(tmp_path / "q", {"1dev": None})
    else:
        root = qs.write_layout(tmp_path / "q", {"1dev": None})
        (root / "U4").mkdir()
    proc, doc = _gate(root, check=2)
    if case == "empty-plan":
        assert doc["verdict"] == "no-evidence" and doc["plans"][0]["seeds_compared"] == 0
    else:
        assert len(proc.stderr.splitlines()) == 1 and ("at least 2" in proc.stderr or "no plan" in proc.stderr)


def test_size_mismatch_names_the_file(tmp_path):
    root = qs.write_layout(tmp_path / "q", {"1dev": None, "U4": 2.0})
    qs.save_png(root / "U4" / "seed1.png", np.zeros((16, 32, 3), np.uint8))
    proc = run_script("quality_gate.py", str(root), check=2)
    assert f"{root / 'U4' / 'seed1.png'}: shape (1, 16, 32, 3)" in proc.stderr


def test_missing_scikit_image_names_the_extra(tmp_path):
    root = qs.write_layout(tmp_path / "q", {"1dev": None, "U4": 2.0})
    import subprocess
    import sys
    code = ("import sys, runpy; sys.modules['skimage'] = None; "
            f"sys.argv = ['quality_gate.py', {str(root)!r}]; "
            f"runpy.run_path({str(ROOT / 'scripts' / 'quality_gate.py')!r}, run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1
    assert 'pip install -e ".[quality]"' in proc.stderr and "scikit-image" in proc.stderr


@needs_skimage
def test_lpips_is_reported_from_the_package_not_gated(tmp_path):
    """A stand-in lpips package (mean absolute difference of the [-1, 1] tensors) checks the plumbing: the
    NCHW conversion, the [-1, 1] scaling, the mean over frames; LPIPS itself needs its weights."""
    pkg = tmp_path / "fake" / "lpips"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "import torch\nclass LPIPS(torch.nn.Module):\n    def __init__(self, net='alex', verbose=True):\n"
        "        super().__init__()\n    def forward(self, a, b):\n"
        "        assert a.shape[1] == 3 and a.min() >= -1 and a.max() <= 1\n"
        "        return (a - b).abs().mean(dim=(1, 2, 3))\n")
    root = qs.write_layout(tmp_path / "q", {"1dev": None, "U4": 2.0})
    import os
    proc = run_script("quality_gate.py", str(root), "--json", "--lpips", check=0,
                      env={"PYTHONPATH": f"{tmp_path / 'fake'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    doc = json.loads(proc.stdout)
    from PIL import Image
    for row in doc["seeds"]:
        img = np.asarray(Image.open(root / "U4" / f"seed{row['seed']}.png")).astype(np.float64)
        hand = np.mean(np.abs(img - qs.base(row["seed"]))) / 255 * 2
        assert row["lpips"] == pytest.approx(hand, rel=1e-5)
    assert doc["lpips_note"] is None and doc["verdict"] == "pass"
    _proc, doc = _gate(root, "--lpips", check=0)       # the real package is absent here: said, not faked
    if importlib.util.find_spec("lpips") is None:
        assert doc["lpips_note"].startswith("LPIPS not computed: the Python package 'lpips'")


@needs_skimage
def test_a_plan_with_fewer_seeds_says_so(tmp_path):
    root = qs.write_layout(tmp_path / "q", {"1dev": None, "U4": 2.0})
    (root / "U4" / "seed2.png").unlink()
    _proc, doc = _gate(root, check=0)
    u4 = doc["plans"][0]
    assert (u4["verdict"], u4["seeds_compared"], u4["seeds_missing"]) == ("pass", 2, [2])
    assert u4["reason"].endswith("(on 2 of 3 seeds)")
