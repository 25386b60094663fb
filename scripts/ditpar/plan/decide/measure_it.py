"""The closing 'Measure it' line: every link figure the short list's order rests on (a collective on a link class
whose exposed time differs between the short-listed plans), the comm_bench.py command that measures each, and the
plan_bench.py command for the short list itself."""

from __future__ import annotations

# comm_bench.py --ops names (ditpar.comm.bench) and what each one stands for in the cost model's collectives
OPS = (("all-to-all", "all_to_all"), ("all-reduce", "all_reduce"), ("allgather", "all_gather"),
       ("all-gather", "all_gather"), ("ring k,v pass", "sendrecv"), ("send", "sendrecv"), ("p2p", "sendrecv"),
       ("pipefusion", "sendrecv"), ("patch", "sendrecv"))
AXES = (("ulysses", "ulysses"), ("allgather-kv", "kv_allgather"), ("ring", "ring"), ("tp ", "tp"), ("cfg", "cfg"),
        ("pipefusion", "pipefusion"), ("patch", "pipefusion"))
NAMES = {"all_to_all": "all-to-all", "all_reduce": "all-reduce", "all_gather": "all-gather", "sendrecv": "send/recv"}


def _match(table, name: str) -> str | None:
    low = name.lower() + " "
    return next((v for k, v in table if k in low), None)


def figures(short: list, hw, tun) -> list[dict]:
    """One record per (link class, comm_bench op) that a short-listed plan exposes: the plans, and one rank group
    per group size (the plans' own layout) to measure it on."""
    from ditpar.plan.cost import layout

    out: dict[tuple[str, str], dict] = {}
    for r in short:
        bd = r.breakdown
        groups = layout(r.plan, (getattr(r, "tunables", None) or tun).order)
        for family, sec in (getattr(bd, "exposed_by_family_s", None) or {}).items():
            op = _match(OPS, family)
            if op is None or not sec > 0:
                continue
            axis = _match(AXES, family)
            gs = [g for g in groups.get(axis, []) if len(g) > 1] or [list(range(r.plan.devices))]
            g = gs[0]
            link = hw.class_for(g)
            rec = out.setdefault((link, op), {"link": link, "op": op, "collective": NAMES[op], "plans": [],
                                              "groups": {}})
            if r.plan.name not in rec["plans"]:
                rec["plans"].append(r.plan.name)
            rec["groups"].setdefault(len(g), g)
    recs = [out[k] for k in sorted(out)]
    for rec in recs:
        groups = [rec["groups"][k] for k in sorted(rec["groups"])]
        top = max(x for g in groups for x in g)
        text = ";".join(",".join(map(str, g)) for g in groups)
        rec["groups"] = groups
        per_node = hw.devices_per_node
        launch = (f"torchrun --nnodes {top // per_node + 1} --node-rank NODE --nproc-per-node {per_node} --master-addr "
                  "HOST0 --master-port 29500" if top >= per_node else f"torchrun --nproc-per-node {top + 1}")
        rec["command"] = (f"{launch} scripts/comm_bench.py --ops {rec['op']} --groups "
                          f"\"{text}\" --min-bytes 1M --max-bytes 256M --csv bench_{rec['link']}_{rec['op']}.csv")
    return recs


def build(short: list, hw, tun, bench_cmd: str) -> dict:
    """The JSON of the line: the link figures with their commands, and the plan_bench.py command."""
    recs = figures(short, hw, tun) if len(short) > 1 else []
    return {"figures": recs, "plan_bench": bench_cmd or None,
            "then": "python scripts/plan.py ... --bench bench_*.csv" if recs else None}


def render(m: dict) -> str:
    """The closing line ('' when the short list holds one plan)."""
    if not m["figures"]:
        return ""
    parts = [f"{f['link']} {f['collective']} ({', '.join(f['plans'][:4])}): {f['command']}" for f in m["figures"]]
    text = ("Measure it: the short list's order rests on " + str(len(parts)) + " link figure(s); measure each on "
            "these cards, then pass every CSV with --bench: " + " | ".join(parts))
    if m["plan_bench"]:
        text += f". {m['plan_bench']}"
    return "\n" + text + "\n"
