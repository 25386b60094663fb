"""Plot of a few-step analysis: per-step time per config for both tiers, bars from min to max."""

from __future__ import annotations

from typing import Any

from ditpar.cli import pyplot, save_figure

_STYLE = {"few": ("tab:blue", "o", -0.12), "anchor": ("tab:orange", "s", 0.12)}


def plot_fewstep(payload: dict[str, Any], path: str) -> None:
    """Draw median per-step time (markers) and the min..max range over repeats (bars) per cell."""
    plt = pyplot()
    cells = payload["cells"]
    configs: list[str] = []
    for c in cells:
        if c["config"] not in configs:
            configs.append(c["config"])
    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(configs) + 2.5), 4.2))
    for tier, (color, marker, dx) in _STYLE.items():
        mine = [c for c in cells if c["tier"] == tier]
        if not mine:
            continue
        xs = [configs.index(c["config"]) + dx for c in mine]
        ys = [c["per_step_s"] * 1e3 for c in mine]
        lo = [(c["per_step_s"] - c["per_step_min_s"]) * 1e3 for c in mine]
        hi = [(c["per_step_max_s"] - c["per_step_s"]) * 1e3 for c in mine]
        steps = payload["steps"][tier]
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt=marker, color=color, capsize=4, ms=6,
                    label=f"{tier} ({steps} steps)")
        for x, c in zip(xs, mine, strict=True):
            if c["status"] != "ok":
                ax.annotate(c["status"], (x, c["per_step_max_s"] * 1e3), textcoords="offset points",
                            xytext=(0, 6), ha="center", fontsize=7, color="red")
    devices = {c["config"]: c["devices"] for c in cells}
    ax.set_xticks(range(len(configs)))
    r = {d["config"]: d["r"] for d in payload["drift"]}
    ax.set_xticklabels([f"{c}\n{devices[c]} dev" + ("" if r.get(c) is None else f", r={r[c]:.3f}")
                        for c in configs])
    for label, c in zip(ax.get_xticklabels(), configs, strict=True):
        status = next((d["status"] for d in payload["drift"] if d["config"] == c), "ok")
        if status != "ok":
            label.set_color("red")
    ax.set_ylabel("DiT per-step (ms): median, bar min..max")
    ax.set_title(f"few-step validation: verdict {payload['verdict']}", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    # dashed separators between card-count groups: only same-card-count configs are compared
    for i in range(1, len(configs)):
        if devices[configs[i]] != devices[configs[i - 1]]:
            ax.axvline(i - 0.5, color="grey", ls="--", lw=0.8)
    save_figure(fig, path)
    plt.close(fig)
