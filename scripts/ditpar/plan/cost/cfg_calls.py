"""CFG as pipelines run it: some pipelines call the transformer twice per step (the conditional branch, then the
unconditional one, each a batch of 1) instead of once on a batch of 2. Without CFG parallel such a step pays every
op's dispatch and every collective call twice and runs its GEMMs at batch-1 rows; with CFG parallel each rank runs
one of the two calls, so nothing changes there.

Families whose diffusers pipelines make two calls (read in huggingface/diffusers, src/diffusers/pipelines):
- qwen-image: qwenimage/pipeline_qwenimage.py (and the edit pipelines): `if do_true_cfg:` a second
  `self.transformer(...)` on the negative prompt inside `cache_context("uncond")`;
- wan: wan/pipeline_wan.py (and image-to-video): `if self.do_classifier_free_guidance:` a second
  `current_model(...)` for `noise_uncond` inside `cache_context("uncond")`.
Every other family is priced as one call on a batch of 2 (torch.cat of the latents, e.g. CogVideoX, PixArt, SD3).
"""

from __future__ import annotations

TWO_CALL_FAMILIES = ("qwen-image", "wan")
# name prefixes of those families (the same as inputs/frameworks.FAMILIES, read here without importing it: the
# frameworks module prices plans, so importing it from the cost room would close an import circle)
_PREFIXES = (("qwenimage", "qwen-image"), ("wan", "wan"))


def family(model) -> str:
    """The model's own `family`, else the family its name starts with among TWO_CALL_FAMILIES ('' for others)."""
    from ditpar.plan.inputs.presets import normalize

    own = str(getattr(model, "family", "") or "")
    if own:
        return own
    key = normalize(model.name)
    return next((fam for prefix, fam in _PREFIXES if key.startswith(prefix)), "")


def two_calls(model, shape, plan) -> bool:
    """True when a step of this plan runs the two CFG branches as two transformer calls on the same ranks."""
    return bool(shape.cfg) and plan.cfg == 1 and family(model) in TWO_CALL_FAMILIES


def doubled(bd, note: str):
    """The breakdown of one batch-1 call per step turned into two calls per step (every time and byte figure x 2)."""
    for name in ("latency_s", "step_s", "compute_s", "hidden_s", "host_bound_s", "pipeline_s", "flops_per_step"):
        setattr(bd, name, getattr(bd, name) * 2)
    for table in (bd.exposed_by_link_s, bd.exposed_by_family_s, bd.exposed_alltoall_by_link_s,
                  bd.bytes_by_link_per_step, bd.bytes_by_link_per_layer):
        for k in table:
            table[k] *= 2
    bd.notes.append(note)
    return bd
