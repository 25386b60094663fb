"""Which step each event belongs to: the profile's own step label, else the step window holding its start.

Each event gets at most one step, so overlapping GPU step windows never count an event twice.
NA means "outside every step" -- unless the profile has no steps at all, when the whole capture is
one window (see :func:`has_steps`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def assign_steps(events: pd.DataFrame, steps: pd.DataFrame | None) -> pd.Series:
    """Step of every event (Int64, NA outside steps), for events of ONE rank."""
    own = events["step"]
    if own.notna().any():
        return own.astype("Int64")
    out = pd.Series(pd.NA, index=events.index, dtype="Int64")
    if steps is None or steps.empty or steps["step"].isna().all():
        return out
    win = steps.dropna(subset=["step"]).sort_values("start_ns")
    lo, hi = win["start_ns"].to_numpy(np.int64), win["end_ns"].to_numpy(np.int64)
    starts = events["start_ns"].to_numpy(np.int64)
    k = np.searchsorted(lo, starts, side="right") - 1
    ok = (k >= 0) & (starts < hi[np.maximum(k, 0)])
    labels = win["step"].to_numpy()
    vals = np.where(ok, labels[np.maximum(k, 0)], pd.NA)
    return pd.Series(pd.array(vals, dtype="Int64"), index=events.index)


def has_steps(labels: pd.Series) -> bool:
    """True when at least one event carries a step; False means: treat the capture as one window."""
    return bool(labels.notna().any())


def rank_steps(steps: pd.DataFrame | None, rank: int) -> pd.DataFrame | None:
    """The step windows of one rank, or None."""
    if steps is None or steps.empty:
        return None
    return steps[steps["rank"] == rank]
