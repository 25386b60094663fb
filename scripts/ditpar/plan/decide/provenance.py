"""Where every input figure of an answer comes from: preset (with its source), measured by the user (--bench, --topo,
--measured, --ref-latency, --ref-step-s), given by the user (--set, --model-file, --model-config, --hardware FILE), or
borrowed (a figure measured on another machine). Only measured figures narrow a range; given and borrowed widen it."""

from __future__ import annotations

KINDS = ("preset", "measured", "given", "borrowed")


def _rec(figure: str, value, kind: str, source: str) -> dict:
    return {"figure": figure, "value": value, "provenance": kind, "source": source}


def link_kind(rec: dict, hw) -> str:
    """A link-figure record's provenance: measured (--bench), given (--set), borrowed (the preset's figure was
    measured on another class: evidence other-class) or preset."""
    if str(rec.get("how", "")).startswith("--set "):
        return "given"
    if rec.get("measured"):
        return "measured"
    link = hw.links.get(rec["link"])
    return "borrowed" if link is not None and link.evidence == "other-class" else "preset"


def inputs(args, model, hw, box) -> list[dict]:
    """One record per input figure the answer rests on, with its provenance and source."""
    hw_file = str(getattr(args, "hardware", "") or "").endswith(".toml")
    out = []
    if getattr(args, "model_file", None):
        out.append(_rec("model", model.name, "given", f"--model-file {args.model_file}"))
    elif getattr(args, "model_config", None):
        out.append(_rec("model", model.name, "given", f"--model-config {args.model_config} (the model's own config)"))
    else:
        path = str(getattr(model, "path", "") or "")
        out.append(_rec("model", model.name, "preset", "templates/models/" + path.rsplit("/", 1)[-1] if path
                        else "templates/models"))
    sets = {n.split(":", 1)[0] for n in box.overrides}
    for key, label in (("peak_tflops_bf16", "peak TFLOPS (bf16)"), ("mfu", "mfu")):
        src = str(hw.sources.get(key, ""))
        kind = ("given" if key in sets or hw_file else "borrowed" if src.lower().startswith("borrowed") else "preset")
        out.append(_rec(label, getattr(hw, key), kind, "--set" if key in sets else (
            f"--hardware {args.hardware}" if hw_file else src.split(";")[0][:160])))
    if args.ref_latency is not None or args.ref_step_s is not None:
        flag = "--ref-latency" if args.ref_latency is not None else "--ref-step-s"
        out.append(_rec("compute rate", box.tun.compute_scale, "measured", f"{flag} (one 1-card run)" if getattr(args, "ref_plan", None) is None
                            else f"{flag} (one run of --ref-plan {args.ref_plan})"))
    if getattr(args, "topo", None):
        out.append(_rec("topology", hw.name, "measured", f"--topo {args.topo}"))
    elif getattr(args, "domains", None):
        out.append(_rec("topology", args.domains, "given", f"--domains {args.domains}"))
    for rec in box.link_records:
        group = rec["figure"].rsplit(" ", 1)[-1]
        if rec["figure"].startswith("all-to-all") and group.isdigit() and int(group) > args.devices:
            continue   # a table entry no group of this run reaches
        kind = "given" if hw_file and not rec.get("measured") else link_kind(rec, hw)
        out.append(_rec(f"{rec['link']} {rec['figure']}", rec["GBps"], kind, rec.get("how", "")))
    if getattr(args, "measured", None):
        out.append(_rec("plan times", args.measured, "measured", f"--measured {args.measured}"))
    return out


def machine_not_measured(records: list[dict]) -> list[str]:
    """The hardware figures the answer rests on that are given or borrowed (the machine stratum of a range)."""
    return [r["figure"] for r in records if r["figure"] != "model" and r["provenance"] in ("given", "borrowed")]


def render(records: list[dict]) -> str:
    """One line per provenance: the figures that have it."""
    lines = ["", "inputs by provenance (only measured figures narrow a range; given and borrowed widen it):"]
    for kind in KINDS:
        names = [r["figure"] for r in records if r["provenance"] == kind]
        if names:
            lines.append(f"  {kind:<9} " + "; ".join(names))
    return "\n".join(lines) + "\n"
