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

The two branches need not carry the same work. A batch of 2 needs both text sequences at one length (the
tokenizer pads them), and xDiT's CFG parallel splits that padded batch (xdit-project/xDiT@dd384529ef80:
xfuser/model_executor/pipelines/base_pipeline.py, _process_cfg_split_batch: torch.cat of negative and positive
embeddings on one rank, rank 0 the negative and rank 1 the positive under CFG parallel). A two-call pipeline
encodes each prompt at its own length (Qwen-Image's negative prompt " " is a few tokens against the prompt's
hundreds), and vLLM-Omni's CFG parallel runs each branch's own arguments on its rank
(vllm-project/vllm-omni@0473904e9d18:vllm_omni/diffusion/distributed/cfg_parallel.py,
predict_noise_maybe_with_cfg: rank 0 positive_kwargs, rank 1 negative_kwargs, then an all-gather). So:
- two calls on the same ranks: the step pays the conditional call plus the (shorter) unconditional one;
- a batch of 2, or CFG parallel: the step waits for the longer branch (the critical path), priced at the longer
  text: CFG parallel saves (cond + uncond) - max(cond, uncond), less than half of a two-call step.
The GEMMs see the rows on the card: a batch of 2 runs at 2 x tokens rows, each of two calls (and each rank of CFG
parallel) at 1 x tokens, priced on the shape curve (ditpar.plan.cost.efficiency), so at short sequences CFG
parallel's per-rank GEMMs run below the batch-2 rate.
"""

from __future__ import annotations

TWO_CALL_FAMILIES = ("qwen-image", "wan")


def family(model) -> str:
    """The model's own `family`, else the family its name starts with (inputs/families.py), '' for none."""
    from ditpar.plan.inputs.families import family_of

    return family_of(model, default="")


def two_calls(model, shape, plan, how: str = "") -> bool:
    """True when a step of this plan runs the two CFG branches as two transformer calls on the same ranks: `how` is
    the framework's way ('two', 'batch'), '' for the model's diffusers pipeline (TWO_CALL_FAMILIES)."""
    if not shape.cfg or plan.cfg != 1:
        return False
    return how == "two" if how in ("two", "batch") else family(model) in TWO_CALL_FAMILIES


def text_tokens(shape) -> int:
    """Text tokens of the conditional branch in the model's text stream (joint if it has one, else cross)."""
    return shape.text_joint if shape.text_joint else shape.text_cross


def branch_shape(shape, tokens: int):
    """One branch as a request of its own (batch 1, CFG off) carrying `tokens` text tokens in the model's stream."""
    import dataclasses

    if shape.text_joint:
        return dataclasses.replace(shape, cfg=False, text_joint=tokens, text_uncond=-1)
    return dataclasses.replace(shape, cfg=False, text_cross=tokens, text_uncond=-1)


def uneven(shape) -> bool:
    """True when the negative prompt's text length differs from the prompt's (a CFG request only)."""
    return bool(shape.cfg) and shape.text_uncond >= 0 and shape.text_uncond != text_tokens(shape)


def critical_shape(shape):
    """The request as a batch of 2 or CFG parallel runs it: both branches at the longer text (the padded batch, or the
    slower rank)."""
    import dataclasses

    if not uneven(shape):
        return shape
    longer = max(text_tokens(shape), shape.text_uncond)
    if shape.text_joint:
        return dataclasses.replace(shape, text_joint=longer, text_uncond=-1)
    return dataclasses.replace(shape, text_cross=longer, text_uncond=-1)


def summed(a, b, note: str = ""):
    """Breakdown `a` with `b`'s time and bytes added (two calls of unequal work, or two parts of a request)."""
    for name in ("latency_s", "compute_s", "hidden_s", "host_bound_s", "pipeline_s"):
        setattr(a, name, getattr(a, name) + getattr(b, name))
    for table, other in ((a.exposed_by_link_s, b.exposed_by_link_s), (a.exposed_by_family_s, b.exposed_by_family_s),
                         (a.exposed_alltoall_by_link_s, b.exposed_alltoall_by_link_s)):
        for k, v in other.items():
            table[k] = table.get(k, 0.0) + v
    if note:
        a.notes.append(note)
    return a


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
