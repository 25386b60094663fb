"""The unseen rounds: published tables transcribed and scored before anything in the model changed for them
(benchmarks/VALIDATION.md section 4), the calibration sample of the speedup range (judge/conformal.py)."""

from __future__ import annotations

# benchmarks/VALIDATION.md sections 6, 7.0, 7.5, 7.6, 7.9, 7.11, 7.12, 7.14, 7.16, 7.27, 7.29: the tables of each round.
# xdit_cogvideox_l40.csv was seen by the author before the second round was scored and is kept out (7.6).
UNSEEN_ROUNDS = {
    "round 1 (2026-12-04)": ("xdit_cogvideox15_l20.csv", "xdit_cogvideox15_l40.csv"),
    "MindIE-SD round (2026-12-04)": ("mindiesd_quick_start.csv",),
    "round 2 (2026-12-04)": ("xdit_cogvideox_a100.csv", "xdit_pixart_l40_hybrid.csv", "vllmomni_qwen_image_a100.csv",
                             "diffusers_distributed_inference.csv"),
    "round 3 (2026-12-04)": ("cachedit_flux2_hybrid_l20.csv", "cachedit_nvidia_h100.csv", "cachedit_ascend_800ia2.csv"),
    "round 4 (2026-12-05)": ("diffsynth_engine_qwen_image_multicard.csv", "wan21_comp_effic.csv",
                             "wan22_comp_effic.csv"),
    "Open-Sora 2.0 round (2026-12-05)": ("opensora2_comp_effic.csv",),
    "round 5 (2026-12-05)": ("mochi_xdit_l40.csv", "vllmomni_pr1221_wan22_ti2v_h800.csv",
                             "vllmomni_qwen_image_edit_tp_h200.csv", "hunyuanworld_voyager_xdit_h20.csv"),
    "round 6 (2026-12-07)": ("vllmomni_qwen_image_ulysses_h800.csv", "sglang_ci_h100_perf_baselines.csv"),
    "round 7 (2026-12-07)": ("trtllm_pr13821_wan22_gb200.csv", "vllmomni_pr851_longcat_cfg_h800.csv",
                             "cachedit_ascend_zimage_800ia2.csv"),
    "round 8 (2026-12-08)": ("trtllm_visualgen_flux_b200.csv", "sglang_pr27826_flux_tp_h200.csv",
                             "fastvideo_issue175_hunyuan_h100.csv"),
    "round 9 (2026-12-08)": ("teacache_xdit_a800.csv",),
}


def round_of(source: str) -> str | None:
    """The unseen round a table belongs to (by file name), else None (a seen table)."""
    name = str(source).replace("\\", "/").rsplit("/", 1)[-1]
    return next((r for r, files in UNSEEN_ROUNDS.items() if name in files), None)
