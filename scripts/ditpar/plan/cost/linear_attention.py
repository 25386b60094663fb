"""Linear attention (SANA, SANA-Video: ReLU linear attention) under sequence parallelism: each rank reduces its own
tokens' keys and values to a per-head state, the states are summed over the group (one all-reduce), and every rank
applies the summed state to its own queries. The state is small and does not grow with the sequence, and no head is
split, so the head-divisibility rule of Ulysses does not apply to this form.

The state of one head is (head_dim + 1) x head_dim in fp32: diffusers' SanaLinearAttnProcessor2_0 pads V with a row of
ones (the normaliser) and casts Q, K, V to float before the products (huggingface/diffusers
src/diffusers/models/attention_processor.py, SanaLinearAttnProcessor2_0: F.pad(value, (0, 0, 0, 1), value=1.0),
scores = value @ key); the all-gather-then-sum form is LASP-2 (arXiv:2502.07563), here summed in one all-reduce.
"""

from __future__ import annotations

STATE_BYTES_PER_ELEMENT = 4   # fp32 state (the processor casts to float)
OPS_STATE_FORM = 4            # eager ops the form adds per block: the all-reduce call, its view, the float cast, the add


def is_linear(model) -> bool:
    return getattr(model, "attention", "softmax") == "linear"


def state_bytes(head_dim: int, heads_on_rank: float, batch: float) -> float:
    """Bytes of the summed state one rank holds: batch x heads x (head_dim + 1) x head_dim x 4."""
    return float(batch) * float(heads_on_rank) * (head_dim + 1) * head_dim * STATE_BYTES_PER_ELEMENT


def state_allreduce_bytes(head_dim: int, heads_on_rank: float, batch: float, group: int) -> float:
    """Bytes one rank sends in a ring all-reduce of the state over `group` ranks: 2 (g - 1) / g of it."""
    if group <= 1:
        return 0.0
    return 2.0 * (group - 1) / group * state_bytes(head_dim, heads_on_rank, batch)
