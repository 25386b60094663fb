"""Framework capability profiles (templates/frameworks/*.toml): which plans a real framework runs.

Each profile names the parallel forms it offers per model family, how it treats a sequence or a head
count that does not divide (pad, uneven split, reject), GQA K/V replication and the forms it cannot
combine. `runs(fw, ...)` answers one plan for one framework with the reason when it cannot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ditpar import formats
from ditpar.errors import InputError
from ditpar.plan.cost.memo import Memo
from ditpar.plan.cost.plans import Plan
from ditpar.plan.cost.tp_layout import TP_LAYOUTS
from ditpar.plan.inputs import comm_options
from ditpar.plan.inputs.families import family_of
from ditpar.plan.inputs.presets import _read_toml, normalize, templates_dir
from ditpar.plan.inputs.recipes import parse_recipes

FORMS = ("ulysses", "ring", "kv_allgather", "attn2d", "tp", "pipefusion", "cfg", "dp")
SEQUENCE_FORMS = ("ulysses", "ring", "kv_allgather", "attn2d")
# How a framework runs AllGather-KV: 'one_call' (K and V gathered once, one attention call: vLLM-Omni allgather_kv,
# SGLang --sp-attention-mode kv_gather, LightX2V kv_all_gather) or 'loop' (diffusers' TemplatedRingAttention: one
# call per gathered chunk and an fp32 merge after each)
KV_GATHER_IMPLS = ("one_call", "loop")
# How a framework runs the two CFG branches without CFG parallel: 'two' (two transformer calls per step, batch 1
# each, every branch at its own text length: vLLM-Omni), 'batch' (one call on the concatenated batch of 2: xDiT),
# 'pipeline' (as the model's diffusers pipeline does: ditpar.plan.cost.cfg_calls.TWO_CALL_FAMILIES)
CFG_CALLS = ("two", "batch", "pipeline")
PADDING = ("pad", "uneven", "reject")
# How a framework implements tensor parallelism: 'dtensor' (torch.distributed.tensor.parallel
# parallelize_module with Colwise/RowwiseParallel: every parallelized linear pays DTensor dispatch on the host,
# ditpar.plan.cost.timing.DTENSOR_LINEAR_HOST_US), 'explicit' (its own column/row-parallel modules calling the
# collective directly: no extra host cost), 'none' (no TP), 'unknown' (not read: no extra host cost counted).
TP_IMPLS = ("dtensor", "explicit", "none", "unknown")
# Which collectives a framework's TP issues per block (ditpar.plan.cost.tp_layout): 'column_row' (one all-reduce per
# attention and per MLP), 'column_row_adaln_gather' (+ an all-gather per sharded AdaLN linear: cache-dit),
# 'gather_after_column' (every column projection's output all-gathered, attention on all heads), 'unknown' (not
# read: priced as column_row_adaln_gather)
TP_LAYOUT_NAMES = (*TP_LAYOUTS, "unknown")
APPROXIMATE = {"pipefusion": "PipeFusion reuses one-step-stale activations of the other patches "
                             "(arXiv 2405.14430): the output differs from one device"}


@dataclass(frozen=True)
class Framework:
    """One framework's capabilities; `forms[form]` lists model families ('*' = any model)."""

    name: str
    aliases: tuple[str, ...]
    version: str
    vendors: tuple[str, ...]
    backends: tuple[str, ...]
    sequence_indivisible: str
    heads_indivisible: str
    gqa_kv_replication: bool
    weight_sharding: bool
    vae_parallel: bool
    text_encoder_parallel: bool
    forms: dict[str, tuple[str, ...]]
    form_vendors: dict[str, tuple[str, ...]] = field(default_factory=dict)
    incompatible: tuple[tuple[str, str], ...] = ()
    sequence_pad_families: tuple[str, ...] = ()   # families padded even when sequence_indivisible = reject
    padding_single_form: bool = False             # pad/uneven only when one SP form is used (diffusers *_anything)
    vendor_families: dict[str, tuple[str, ...]] = field(default_factory=dict)  # families tested per vendor
    unverified: tuple[str, ...] = ()
    sources: dict[str, str] = field(default_factory=dict)
    path: str = ""
    tp_impl: str = "unknown"                      # TP_IMPLS: how TP runs (host cost per parallelized linear)
    tp_layout: str = "unknown"                    # TP_LAYOUT_NAMES: which collectives TP issues per block
    kv_gather_impl: str = "loop"                  # KV_GATHER_IMPLS: how AllGather-KV runs
    cfg_calls: str = "pipeline"                   # CFG_CALLS: how the two CFG branches run without CFG parallel
    exclude: dict[str, tuple[str, ...]] = field(default_factory=dict)  # form -> model presets whose launcher lacks it
    recipes: tuple = ()                           # ditpar.plan.inputs.recipes.Recipe: how to launch each form
    no_recipe: dict[str, str] = field(default_factory=dict)  # family -> why the profile has no launch recipe
    vae_parallel_families: tuple[str, ...] = ()   # families whose VAE decode it splits over the request's cards
    weight_offload: str = "none"                  # layer-wise DiT weight offload to host memory: none | single_card | any
    comm_options: dict = field(default_factory=dict)  # option -> {'setting', 'source'} (inputs.comm_options)

    def offers(self, form: str, family: str, vendor: str, model_name: str = "") -> bool:
        if model_name and self.exclude.get(form) and \
                normalize(model_name) in {normalize(m) for m in self.exclude[form]}:
            return False
        fams = self.forms.get(form, ())
        if "*" not in fams and family not in fams:
            return False
        if vendor in self.vendor_families and "*" not in self.vendor_families[vendor] \
                and family not in self.vendor_families[vendor]:
            return False
        return vendor in self.form_vendors.get(form, self.vendors)

    def pads_sequence(self, family: str, plan: Plan) -> bool:
        """Whether this framework pads (or splits unevenly) a sequence that does not divide sp."""
        if self.padding_single_form and sum(plan.degree(f) > 1 for f in SEQUENCE_FORMS) > 1:
            return False
        return self.sequence_indivisible != "reject" or family in self.sequence_pad_families

    def pads_heads(self, plan: Plan) -> bool:
        """Whether heads that do not divide Ulysses x TP are padded."""
        if self.padding_single_form and sum(plan.degree(f) > 1 for f in SEQUENCE_FORMS) > 1:
            return False
        return self.heads_indivisible == "pad"

    def as_dict(self) -> dict:
        return {"name": self.name, "version": self.version, "vendors": list(self.vendors),
                "backends": list(self.backends), "sequence_indivisible": self.sequence_indivisible,
                "heads_indivisible": self.heads_indivisible, "gqa_kv_replication": self.gqa_kv_replication,
                "weight_sharding": self.weight_sharding, "tp_impl": self.tp_impl,
                "tp_layout": self.tp_layout,
                "kv_gather_impl": self.kv_gather_impl, "cfg_calls": self.cfg_calls,
                "forms": {k: list(v) for k, v in self.forms.items()},
                "exclude": {k: list(v) for k, v in self.exclude.items()},
                "vae_parallel_families": list(self.vae_parallel_families), "weight_offload": self.weight_offload,
                "comm_options": {k: v["setting"] for k, v in self.comm_options.items()},
                "recipes": [r.name for r in self.recipes], "unverified": list(self.unverified), "path": self.path}


def _strs(data: dict, key: str, path: Path, default=None) -> tuple[str, ...]:
    if key not in data and default is not None:
        return tuple(default)
    v = data.get(key)
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise InputError(f"{path}: key '{key}' must be a list of strings, got {v!r}")
    return tuple(v)


def _bool(data: dict, key: str, path: Path) -> bool:
    v = data.get(key)
    if not isinstance(v, bool):
        raise InputError(f"{path}: key '{key}' must be true or false, got {v!r}")
    return v


def _choice(data: dict, key: str, path: Path, allowed: tuple[str, ...]) -> str:
    v = data.get(key)
    if v not in allowed:
        raise InputError(f"{path}: key '{key}' must be one of {', '.join(allowed)}, got {v!r}")
    return v


def parse_framework(data: dict, path: Path) -> Framework:
    """Build and check one profile; every bad key is an InputError naming the file and key."""
    for key in ("name", "version"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise InputError(f"{path}: key '{key}' must be a non-empty string")
        formats.check_text(data[key], f"{path}: key '{key}'", one_line=True)
    for i, alias in enumerate(_strs(data, "aliases", path, default=())):
        formats.check_text(alias, f"{path}: key 'aliases[{i}]'", one_line=True)
    forms_raw = data.get("forms")
    if not isinstance(forms_raw, dict):
        raise InputError(f"{path}: missing table [forms] (form = [model families])")
    unknown = sorted(set(forms_raw) - set(FORMS))
    if unknown:
        raise InputError(f"{path}: forms.{unknown[0]} is not a form; expected {', '.join(FORMS)}")
    forms = {f: _strs(forms_raw, f, path, default=()) for f in FORMS}
    fv_raw = data.get("form_vendors", {})
    if not isinstance(fv_raw, dict) or set(fv_raw) - set(FORMS):
        raise InputError(f"{path}: [form_vendors] must be a table of form = [vendors] ({', '.join(FORMS)}), "
                         f"got {fv_raw!r}"[:300])
    form_vendors = {f: _strs(fv_raw, f, path) for f in fv_raw}
    vf_raw = data.get("vendor_families", {})
    if not isinstance(vf_raw, dict):
        raise InputError(f"{path}: [vendor_families] must be a table of vendor = [families]")
    vendor_families = {v: _strs(vf_raw, v, path) for v in vf_raw}
    single = data.get("padding_single_form", False)
    if not isinstance(single, bool):
        raise InputError(f"{path}: key 'padding_single_form' must be true or false, got {single!r}")
    pairs = data.get("incompatible", [])
    if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 and set(p) <= set(FORMS)
                                              for p in pairs):
        raise InputError(f"{path}: key 'incompatible' must be a list of [form, form] pairs of {', '.join(FORMS)}")
    ex_raw = data.get("exclude", {})
    if not isinstance(ex_raw, dict) or set(ex_raw) - set(FORMS):
        raise InputError(f"{path}: [exclude] must be a table of form = [model preset names] ({', '.join(FORMS)})")
    exclude = {f: _strs(ex_raw, f, path) for f in ex_raw}
    recipes, no_recipe = parse_recipes(data, path)
    sources = data.get("sources")
    if not isinstance(sources, dict) or "forms" not in sources:
        raise InputError(f"{path}: [sources] must give at least 'forms' (every fact carries its source)")
    return Framework(
        name=data["name"], aliases=_strs(data, "aliases", path, default=()), version=data["version"],
        vendors=_strs(data, "vendors", path), backends=_strs(data, "backends", path),
        sequence_indivisible=_choice(data, "sequence_indivisible", path, PADDING),
        heads_indivisible=_choice(data, "heads_indivisible", path, ("pad", "reject")),
        gqa_kv_replication=_bool(data, "gqa_kv_replication", path),
        weight_sharding=_bool(data, "weight_sharding", path), vae_parallel=_bool(data, "vae_parallel", path),
        text_encoder_parallel=_bool(data, "text_encoder_parallel", path), forms=forms,
        form_vendors=form_vendors, incompatible=tuple(tuple(p) for p in pairs),
        sequence_pad_families=_strs(data, "sequence_pad_families", path, default=()),
        padding_single_form=single, vendor_families=vendor_families,
        unverified=_strs(data, "unverified", path, default=()), sources=dict(sources), path=str(path),
        tp_impl=_choice({"tp_impl": data.get("tp_impl", "unknown")}, "tp_impl", path, TP_IMPLS),
        tp_layout=_choice({"tp_layout": data.get("tp_layout", "unknown")}, "tp_layout", path, TP_LAYOUT_NAMES),
        kv_gather_impl=_choice({"kv_gather_impl": data.get("kv_gather_impl", "loop")}, "kv_gather_impl", path,
                               KV_GATHER_IMPLS),
        cfg_calls=_choice({"cfg_calls": data.get("cfg_calls", "pipeline")}, "cfg_calls", path, CFG_CALLS),
        exclude=exclude, recipes=recipes, no_recipe=no_recipe,
        vae_parallel_families=_strs(data, "vae_parallel_families", path, default=()),
        weight_offload=_choice({"weight_offload": data.get("weight_offload", "none")}, "weight_offload", path,
                               ("none", "single_card", "any")),
        comm_options=comm_options.parse(data, path))


def vae_degree(fw, model, plan: Plan) -> int:
    """Cards `fw` splits this model's VAE decode over under `plan`: every card of the request where its profile
    lists the model family in vae_parallel_families (the decode reuses the DiT group), else 1 (serial)."""
    fams = getattr(fw, "vae_parallel_families", ()) if fw is not None else ()
    if not (fw is not None and fw.vae_parallel and fams and ("*" in fams or model_family(model) in fams)):
        return 1
    return max(1, plan.devices // max(1, plan.dp))


@lru_cache(maxsize=4)
def _registry(folder: str) -> dict[str, Framework]:
    root = Path(folder)
    if not root.is_dir():
        raise InputError(f"{root}: framework profile folder not found")
    out: dict[str, Framework] = {}
    for path in sorted(root.glob("*.toml")):
        if path.stem.startswith("custom-"):   # templates for your own stack (--framework FILE.toml)
            continue
        fw = parse_framework(_read_toml(path), path)
        out[fw.name] = fw
    if not out:
        raise InputError(f"{root}: no framework profiles (*.toml)")
    return out


def all_frameworks() -> list[Framework]:
    """Every profile under templates/frameworks, by file name order."""
    return list(_registry(str(templates_dir() / "frameworks")).values())


NATIVE_BACKEND = {"nvidia": "nccl", "ascend": "hccl", "amd": "nccl"}   # torch backend names (ROCm: "nccl" runs RCCL)
#: the collective library under that backend, as answers name it
COLLECTIVE_LIBRARY = {"nvidia": "NCCL", "ascend": "HCCL", "amd": "RCCL"}
# Which framework the `framework` column names when several run a plan: the vendor's own or reference stack
# first (MindIE-SD is Huawei's for Ascend; xDiT is the reference DiT-parallel implementation whose published
# tables the cost model is judged on), then by breadth of model coverage; profiles not listed come after, in
# the order given (file name order by default).
PREFERENCE = {"ascend": ("MindIE-SD", "xDiT", "cache-dit", "vLLM-Omni", "LightX2V"),
              "nvidia": ("xDiT", "cache-dit", "diffusers-CP", "ParaAttention", "vLLM-Omni", "LightX2V"),
              "amd": ("cache-dit", "vLLM-Omni", "SGLang-diffusion")}


def preferred(runners: list[Framework], hw) -> list[Framework]:
    """Frameworks that run a plan, the one to name first: its backends include the hardware's native one
    (HCCL on Ascend, NCCL on NVIDIA), then PREFERENCE for the vendor, then the given order (stable)."""
    vendor = str(getattr(hw, "vendor", "")).lower()
    native = NATIVE_BACKEND.get(vendor, "")
    order = PREFERENCE.get(vendor, ())

    def key(item: tuple[int, Framework]) -> tuple:
        i, fw = item
        rank = order.index(fw.name) if fw.name in order else len(order)
        return (native not in {b.lower() for b in fw.backends}, rank, i)
    return [fw for _, fw in sorted(enumerate(runners), key=key)]


def resolve_frameworks(names: list[str] | None) -> list[Framework]:
    """Profiles for names or aliases (None or empty: all); an unknown name lists the known ones."""
    every = all_frameworks()
    if not names:
        return every
    index = {}
    for fw in every:
        for a in (fw.name, Path(fw.path).stem, *fw.aliases):
            index[normalize(a)] = fw
    out = []
    for n in names:
        if n.endswith(".toml"):   # a profile of your own stack (same schema)
            fw = parse_framework(_read_toml(Path(n)), Path(n))
            if fw not in out:
                out.append(fw)
            continue
        fw = index.get(normalize(n))
        if fw is None:
            raise InputError(f"--framework {n!r}: unknown; known: {', '.join(f.name for f in every)}")
        if fw not in out:
            out.append(fw)
    return out


_FAMILY, _RUNS, _CAPS = Memo(), Memo(), Memo()


def model_family(model) -> str:
    """Family of a model preset ('flux', 'wan', ...), or the preset's own `family`, else 'custom'."""
    return _FAMILY.get((model,), None, family_of, model)


def exactness(plan: Plan) -> tuple[bool, str]:
    """(exact, reason): exact = same result as one device up to the order of floating-point reductions."""
    stale = [APPROXIMATE[f] for f in APPROXIMATE if plan.degree(f) > 1]
    if stale:
        return False, "approximate: " + "; ".join(stale)
    return True, "exact: every form recomputes the full attention of the current step (reduction order only)"


def runs(fw: Framework, model, hw, shape, plan: Plan) -> str | None:
    """None when the framework runs the plan on this model and machine, else what it lacks."""
    return runs_each((fw,), model, hw, shape, plan)[0]


def runs_each(fws, model, hw, shape, plan: Plan) -> list[str | None]:
    """runs() of each framework of `fws` in order, remembered per plan (G1, the ranking and the recipes ask it of
    every plan); the answer reads of the plan only which forms it uses and its TP, Ulysses and sequence degrees."""
    fws = tuple(fws)
    vendor = str(getattr(hw, "vendor", "")).lower()
    key = (vendor, plan.used, plan.tp, plan.ulysses, plan.sp)
    return _RUNS.get((model, shape, *fws), key, _runs_each, fws, model, vendor, shape, plan)


def _runs_each(fws: tuple, model, vendor: str, shape, plan: Plan) -> list[str | None]:
    family = model_family(model)
    caps = _CAPS.get((model, *fws), vendor, _capabilities, fws, family, vendor, model.name)
    return [_runs(fw, model, vendor, shape, plan, family, cap) for fw, cap in zip(fws, caps, strict=True)]


def _capabilities(fws: tuple, family: str, vendor: str, name: str) -> list[tuple[frozenset, frozenset, dict]]:
    """Per framework: the forms it offers this family on this vendor, those its launcher for `name` has, and
    the verdict on each set of forms a plan uses (filled as plans ask)."""
    return [(frozenset(f for f in FORMS if fw.offers(f, family, vendor)),
             frozenset(f for f in FORMS if fw.offers(f, family, vendor, name)), {}) for fw in fws]


def _runs(fw: Framework, model, vendor: str, shape, plan: Plan, family: str, cap: tuple) -> str | None:
    if vendor not in fw.vendors:
        return f"no {vendor} support"
    used = plan.used
    offered, named, verdicts = cap
    if used not in verdicts:
        verdicts[used] = _forms_verdict(fw, model.name, vendor, family, used, offered, named)
    if verdicts[used] is not None:
        return verdicts[used]
    return _plan_verdict(fw, model, shape, plan, family)


def _forms_verdict(fw: Framework, name: str, vendor: str, family: str, used: frozenset, offered: frozenset,
                   named: frozenset) -> str | None:
    """What the framework lacks of the forms a plan uses on this model and vendor (None: it has them all)."""
    lack, other = used - offered, (used & offered) - named
    lacks = [f for f in FORMS if f in lack]
    excluded = [f for f in FORMS if f in other]
    if excluded:
        return f"no {'/'.join(excluded)} for {name} ({fw.name}'s launcher for it lacks it)"
    if lacks:
        where = f" on {vendor}" if any(fw.offers(f, family, v) for f in lacks for v in fw.vendors) else ""
        if vendor in fw.vendor_families and family not in fw.vendor_families[vendor] \
                and "*" not in fw.vendor_families[vendor]:
            return f"{family} not supported on {vendor}"
        return f"no {'/'.join(lacks)} for {family}{where}"
    return None


def _plan_verdict(fw: Framework, model, shape, plan: Plan, family: str) -> str | None:
    """What keeps the framework from a plan whose forms it has: combinations, head and sequence divisibility."""
    used = plan.used
    for a, b in fw.incompatible:
        if a in used and b in used:
            return f"{a} does not combine with {b}"
    if plan.tp > 1 and model.heads % plan.tp:
        return f"heads {model.heads} not divisible by tp {plan.tp} (TP shards whole heads)"
    local = model.heads // plan.tp
    if plan.ulysses > 1 and local % plan.ulysses and not fw.pads_heads(plan):
        return f"heads {model.heads} not divisible by ulysses x tp = {plan.ulysses * plan.tp} (no head padding)"
    kv_local = model.kv_heads / plan.tp if model.kv_heads >= plan.tp else 1
    if plan.ulysses > 1 and model.kv_heads < model.heads and kv_local % plan.ulysses \
            and not fw.gqa_kv_replication:
        return f"kv_heads {model.kv_heads} not divisible by ulysses {plan.ulysses} (no K/V head replication)"
    from ditpar.plan.cost.work import padding_for

    if padding_for(model, shape, plan) and not fw.pads_sequence(family, plan):
        return f"sequence {shape.tokens} tokens not divisible by sp {plan.sp} (no padding)"
    return None


def matrix_markdown() -> str:
    """The framework matrix of references/parallel-selection.md §10.1, generated from the profiles."""
    rows = ["| framework | vendors | ulysses | ring | kv_allgather | attn2d | tp | pipefusion | cfg | indivisible sequence "
            "| indivisible heads | GQA K/V replication | weight sharding | unverified |",
            "|---" * 14 + "|"]
    for fw in all_frameworks():
        cells = []
        for form in ("ulysses", "ring", "kv_allgather", "attn2d", "tp", "pipefusion", "cfg"):
            fams = fw.forms.get(form, ())
            text = "any" if "*" in fams else (", ".join(fams) or "-")
            if form == "kv_allgather" and fams:
                text += " (one call)" if fw.kv_gather_impl == "one_call" else " (per-chunk loop)"
            if form in fw.form_vendors:
                text += f" ({'/'.join(fw.form_vendors[form])} only)"
            cells.append(text)
        rows.append(f"| {fw.name} | {'/'.join(fw.vendors)} | " + " | ".join(cells)
                    + f" | {fw.sequence_indivisible} | {fw.heads_indivisible} | "
                    f"{'yes' if fw.gqa_kv_replication else 'no'} | {'yes' if fw.weight_sharding else 'no'} | "
                    f"{len(fw.unverified)} |")
    return "\n".join(rows)


def tp_host_tunables(tun, fw: Framework | None, plan: Plan):
    """Tunables with what the framework that runs the plan decides of its cost: the TP host cost (DTensor dispatch
    per parallelized linear for a 'dtensor' framework on a plan with tp > 1, none otherwise) and how AllGather-KV
    runs (one call after the gather, or diffusers' loop: the loop without a framework), its TP layout (which
    collectives each block issues; the default layout without a framework or when the profile does not say) and how
    it runs the two CFG branches (two calls or a batch of 2; the model's pipeline where the profile does not say)."""
    import dataclasses

    from ditpar.plan.cost.timing import DTENSOR_LINEAR_HOST_US

    us = DTENSOR_LINEAR_HOST_US if fw is not None and fw.tp_impl == "dtensor" and plan.tp > 1 else 0.0
    one_call = fw is not None and fw.kv_gather_impl == "one_call" and plan.kv_allgather > 1
    lay = fw.tp_layout if fw is not None and plan.tp > 1 and fw.tp_layout != "unknown" else tun.tp_layout
    calls = fw.cfg_calls if fw is not None and fw.cfg_calls != "pipeline" else ""
    if us == tun.tp_linear_host_us and one_call == tun.kv_gather_one_call and lay == tun.tp_layout \
            and calls == tun.cfg_calls:
        return tun
    return dataclasses.replace(tun, tp_linear_host_us=us, kv_gather_one_call=one_call, tp_layout=lay, cfg_calls=calls)


def catalogue() -> list[dict[str, Any]]:
    """Every framework profile: name, vendors, the commit it was read at, aliases (plan.py --list frameworks)."""
    return [{"name": f.name, "vendors": ", ".join(f.vendors), "version": f.version, "aliases": ", ".join(f.aliases)}
            for f in sorted(all_frameworks(), key=lambda f: f.name.lower())]
