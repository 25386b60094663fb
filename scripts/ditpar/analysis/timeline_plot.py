"""Timeline picture of one step window: streams as rows, families coloured, gap classes shaded."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ditpar import cli
from ditpar.analysis.bubbles import BubbleReport, RankBubbles
from ditpar.core.events import end_ns
from ditpar.core.profile import ProfileSet
from ditpar.errors import InputError

CLASS_COLOURS = {"released": "#2ca02c", "running": "#ff7f0e", "other": "#bcbd22", "idle": "#d62728"}
COMPUTE_COLOUR, OTHER_COLOUR = "#1f77b4", "#7f7f7f"
FAMILY_COLOURS = ["#9467bd", "#8c564b", "#e377c2", "#17becf", "#ff9896", "#c5b0d5", "#98df8a", "#ffbb78",
                  "#aec7e8", "#c49c94"]


def _pick(report: BubbleReport, rank: int | None) -> RankBubbles:
    if rank is None:
        return report.ranks[0]
    for r in report.ranks:
        if r.rank == rank:
            return r
    raise InputError(f"--plot-rank {rank}: not analysed; ranks: {[r.rank for r in report.ranks]}")


def _window(rb: RankBubbles, step: int | None, range_us) -> tuple[int, int, int]:
    win = rb.windows
    if step is None:
        row = win.iloc[0]
    else:
        hit = win[win["step"] == step]
        if hit.empty:
            raise InputError(f"--plot-step {step}: no such step window on rank {rb.rank}; steps: {win['step'].tolist()}")
        row = hit.iloc[0]
    w0, w1 = int(row["start_ns"]), int(row["end_ns"])
    lo, hi = w0, w1
    if range_us is not None:
        a, b = (int(round(v * 1000)) for v in range_us)
        if b <= a:
            raise InputError(f"--plot-range-us {range_us[0]} {range_us[1]}: expected FROM < TO")
        lo, hi = w0 + a, min(w0 + b, w1)
        if lo >= w1:
            raise InputError(f"--plot-range-us: FROM is past the window end ({(w1 - w0) / 1000:.3f} us)")
    return w0, lo, hi


def _rows(rev: pd.DataFrame, stream: str) -> list[tuple[str, pd.DataFrame]]:
    """(label, events) per stream row: the analysed compute stream first, comm streams after compute."""
    order = {"compute": 0, "other": 2, "comm": 1}
    keys = []
    for s, sub in rev.groupby("stream", sort=False):
        kind = sub["kind"].mode().iloc[0]
        cores = sorted(set(sub["core"]) - {"", "gpu"})
        short = ", ".join(cores[:2]) + (f" +{len(cores) - 2}" if len(cores) > 2 else "")
        label = f"stream {s or '(none)'}" + (f" ({short})" if short else "")
        keys.append(((0 if s == stream else 1, order.get(kind, 3), str(s)), label, sub))
    keys.sort(key=lambda k: k[0])
    return [(label, sub) for _, label, sub in keys]


def plot_window(ps: ProfileSet, report: BubbleReport, path: str, rank: int | None = None,
                step: int | None = None, range_us=None) -> None:
    """Draw one window of one rank into a PNG file."""
    rb = _pick(report, rank)
    w0, lo, hi = _window(rb, step, range_us)
    ev = ps.events[ps.events["rank"] == rb.rank]
    e = end_ns(ev)
    ev = ev[(ev["start_ns"].to_numpy(np.int64) < hi) & (e > lo)]
    rows = _rows(ev, rb.stream)
    families = sorted(set(ev.loc[ev["kind"] == "comm", "family"]))
    fam_colour = {f: FAMILY_COLOURS[i % len(FAMILY_COLOURS)] for i, f in enumerate(families)}

    plt = cli.pyplot()
    height = 1.2 + 0.45 * (len(rows) + 1)
    fig, ax = plt.subplots(figsize=(13, max(2.8, height)))
    to_x = lambda ns: (np.asarray(ns, dtype=np.int64) - w0) / 1000.0  # noqa: E731 - us from window start
    for name, iv in rb.classes.items():
        c = iv.clip(lo, hi)
        for s, t in zip(to_x(c.starts), to_x(c.ends), strict=True):
            ax.axvspan(s, t, color=CLASS_COLOURS[name], alpha=0.12, lw=0)
        ax.broken_barh(list(zip(to_x(c.starts), to_x(c.ends) - to_x(c.starts), strict=True)), (-0.4, 0.8),
                       color=CLASS_COLOURS[name])
    labels = [f"gaps of stream {rb.stream or '(none)'}"]
    for i, (label, sub) in enumerate(rows, start=1):
        s = np.maximum(sub["start_ns"].to_numpy(np.int64), lo)
        t = np.minimum(end_ns(sub), hi)
        colours = [COMPUTE_COLOUR if k == "compute" else fam_colour.get(f, OTHER_COLOUR) if k == "comm"
                   else OTHER_COLOUR for k, f in zip(sub["kind"], sub["family"], strict=True)]
        ax.broken_barh(list(zip(to_x(s), to_x(t) - to_x(s), strict=True)), (i - 0.4, 0.8),
                       facecolors=colours, linewidth=0)
        labels.append(label)
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlim(to_x(lo), to_x(hi))
    ax.set_xlabel("time from window start (us)")
    win = rb.windows
    stp = win["step"].iloc[0] if step is None else step
    ax.set_title(f"rank {rb.rank}, step {stp if not pd.isna(stp) else '(whole capture)'}: "
                 f"compute stream {rb.stream or '(none)'}; gaps shaded by class")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in CLASS_COLOURS.values()]
    names = [f"gap: {k}" for k in CLASS_COLOURS]
    handles += [plt.Rectangle((0, 0), 1, 1, color=COMPUTE_COLOUR)] + \
        [plt.Rectangle((0, 0), 1, 1, color=fam_colour[f]) for f in families] + \
        [plt.Rectangle((0, 0), 1, 1, color=OTHER_COLOUR)]
    names += ["compute"] + families + ["other (memcpy, ...)"]
    ax.legend(handles, names, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    cli.save_figure(fig, path)
    plt.close(fig)
