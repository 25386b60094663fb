"""Launch recipes: the command line (or the few lines of Python) that runs a ranked plan on one framework.

Each profile in templates/frameworks/*.toml carries `[[recipes]]`: the framework's own flag and parameter
names, per form the text a degree > 1 adds (`[recipes.args]`), the world-size rule, what must be set
together, and the file it was read from at the cited commit. `render` fills one recipe for one plan;
`for_result` picks the framework and the recipe for a ranked plan, or says why none applies.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ditpar.errors import InputError

KINDS = ("shell", "python", "json")
# forms a recipe can set, plus 'uneven' (the sequence does not divide the sequence degree and Ulysses is used:
# the framework's own switch for uneven splits), 'uneven_ring' (the same with ring alone) and 'shard' (the plan
# fits memory only with layer-wise weight sharding), 'vae' (the framework splits the VAE decode over {vae} cards),
# 'offload' / 'te_offload' / 'vae_tiling' (the memory unlocks the plan needs: ditpar.plan.decide.unlocks)
ARG_KEYS = ("ulysses", "ring", "kv_allgather", "attn2d", "tp", "pipefusion", "cfg", "dp", "uneven", "uneven_ring",
            "shard", "vae", "offload", "te_offload", "vae_tiling")
UNLOCK_KEYS = {"offload": "offload", "te": "te_offload", "vae": "vae_tiling"}
# {attn2d_rows} x {attn2d_cols}: TensorRT-LLM's attn2d_size = (row_size, col_size); a row (col_size ranks) gathers Q,
# a column (row_size ranks) gathers K and V (ditpar.plan.cost.plans.attn2d_mesh)
PLACEHOLDERS = ("model", "model_id", "script", "steps", "devices", "world", "ulysses", "ring", "kv_allgather",
                "attn2d", "attn2d_rows", "attn2d_cols",
                "tp", "pipefusion", "patches", "warmup", "cfg", "dp", "sp", "cfg_json", "cfg_py", "slug",
                "args", "flags", "config_inline", "width", "height", "frames", "video", "video_flags", "vae")
FORM_KEYS = ("ulysses", "ring", "kv_allgather", "attn2d", "tp", "pipefusion", "cfg", "dp")
_PLACEHOLDER = re.compile(r"\{([a-z_0-9]+)\}")
_STEPS_MARK = "\x00STEPS\x00"
# values that come from the model (a user's own model file may name it anything) or are computed text: the
# renderer quotes them for where they land (shell words in a launch line, string literals in Python or JSON),
# so a template writes them bare, never inside quotes of its own
QUOTED = ("model", "model_id", "config_inline")
_PRE_QUOTED = re.compile(r"""(['"])\{(""" + "|".join(QUOTED) + r""")\}\1""")


@dataclass(frozen=True)
class Recipe:
    """One launcher of one framework: which families it starts and how each form is set."""

    name: str
    families: tuple[str, ...]
    kind: str
    launch: str                      # one line: the command (with {args} for shell, {flags} otherwise)
    world: str                       # the world-size rule, as the framework states it
    source: str                      # repo@commit:file Lnn of the flags
    args: dict[str, str]             # form (or uneven/shard) -> text added when it applies
    config: str = ""                 # python lines or JSON block with {args}
    join: str = " "
    together: tuple[str, ...] = ()
    models: dict[str, str] = field(default_factory=dict)    # preset name -> the framework's model name
    scripts: dict[str, str] = field(default_factory=dict)   # preset name or family -> {script}
    video: str = ""                  # text {video} becomes when the request has frames > 1 (e.g. ' --num_frames {frames}')

    def covers(self, family: str, used: set[str]) -> bool:
        """Whether this recipe starts `family` and sets every used form (dp may run as replicas)."""
        if "*" not in self.families and family not in self.families:
            return False
        return all(f in self.args for f in used if f != "dp")


def _text(d: dict, key: str, where: str, default: str | None = None) -> str:
    v = d.get(key, default)
    if not isinstance(v, str) or (default is None and not v.strip()):
        raise InputError(f"{where}: key '{key}' must be a non-empty string, got {v!r}")
    return v


def _table(d: dict, key: str, where: str) -> dict[str, str]:
    v = d.get(key, {})
    if not isinstance(v, dict) or not all(isinstance(x, str) for x in v.values()):
        raise InputError(f"{where}: [{key}] must be a table of strings")
    return dict(v)


def _strings(d: dict, key: str, where: str) -> tuple[str, ...]:
    v = d.get(key, [])
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise InputError(f"{where}: key '{key}' must be a list of strings, got {v!r}")
    return tuple(v)


def _check_placeholders(text: str, where: str) -> None:
    for name in _PLACEHOLDER.findall(text):
        if name not in PLACEHOLDERS:
            raise InputError(f"{where}: unknown placeholder {{{name}}}; known: {', '.join(PLACEHOLDERS)}")
    quoted = _PRE_QUOTED.search(text)
    if quoted:
        raise InputError(f"{where}: write {{{quoted.group(2)}}} without quotes around it ({quoted.group(0)}): "
                         "the renderer quotes it for the shell, Python or JSON itself")


def parse_recipes(data: dict, path: Path) -> tuple[tuple[Recipe, ...], dict[str, str]]:
    """([[recipes]], [no_recipe]) of one profile; every bad key names the file, the recipe and the key."""
    raw = data.get("recipes", [])
    if not isinstance(raw, list):
        raise InputError(f"{path}: [[recipes]] must be an array of tables")
    out = []
    for i, r in enumerate(raw):
        where = f"{path}: recipes[{i}]"
        if not isinstance(r, dict):
            raise InputError(f"{where}: must be a table")
        kind = _text(r, "kind", where)
        if kind not in KINDS:
            raise InputError(f"{where}: kind {kind!r}: expected one of {', '.join(KINDS)}")
        args = _table(r, "args", where)
        bad = sorted(set(args) - set(ARG_KEYS))
        if bad:
            raise InputError(f"{where}: args.{bad[0]} is not one of {', '.join(ARG_KEYS)}")
        rec = Recipe(name=_text(r, "name", where), families=_strings(r, "families", where), kind=kind,
                     launch=_text(r, "launch", where), world=_text(r, "world", where),
                     source=_text(r, "source", where), args=args, config=_text(r, "config", where, ""),
                     join=_text(r, "join", where, " "), together=_strings(r, "together", where),
                     models=_table(r, "models", where), scripts=_table(r, "scripts", where),
                     video=_text(r, "video", where, ""))
        if not rec.families:
            raise InputError(f"{where}: key 'families' is empty (list the model families it starts, or '*')")
        for text in (rec.launch, rec.config, rec.video, *rec.args.values(), *rec.scripts.values()):
            _check_placeholders(text, where)
        if "{video}" in rec.video:
            raise InputError(f"{where}: key 'video' may not hold {{video}}")
        if kind == "shell" and "{args}" not in rec.launch:
            raise InputError(f"{where}: a shell recipe's launch must hold {{args}}")
        if kind != "shell" and "{args}" not in rec.config:
            raise InputError(f"{where}: a {kind} recipe's config must hold {{args}}")
        if "{steps}" not in rec.launch + rec.config:
            raise InputError(f"{where}: the recipe must set the step count ({{steps}})")
        out.append(rec)
    return tuple(out), _table(data, "no_recipe", str(path))


LAUNCHER_FLAGS = ("--nproc_per_node", "--nproc-per-node", "-m", "--nnodes", "--node-rank", "--master-addr",
                  "--master-port")   # torchrun's own, not the framework's
_FLAG = re.compile(r"(?<![\w-])(--[A-Za-z][\w-]*)")
_KWARG = re.compile(r"\b([A-Za-z_]\w*)=")
_JSON_KEY = re.compile(r'"([A-Za-z_]\w*)"\s*:')


def flag_names(recipe: Recipe) -> set[str]:
    """The names a recipe takes from its framework: command-line flags of a shell recipe (and of a json
    recipe's launcher), keyword arguments of a python recipe, keys of a json recipe. A python recipe's
    launch line passes the same names to your own script, so its flags are not the framework's."""
    texts = [recipe.config, recipe.video, *recipe.args.values()]
    names: set[str] = set()
    if recipe.kind in ("shell", "json"):
        names |= {f for t in (recipe.launch, recipe.video, *recipe.args.values()) for f in _FLAG.findall(t)}
    if recipe.kind == "python":
        names |= {k for t in texts for k in _KWARG.findall(t)}
    if recipe.kind == "json":
        names |= {k for t in texts for k in _JSON_KEY.findall(t)}
    return names - set(LAUNCHER_FLAGS)


# ------------------------------------------------------------------------------------------ rendering


def model_id(model) -> str:
    """The Hugging Face id of a preset: its '-Diffusers' alias, else its first 'org/name' alias, else its name."""
    ids = [a for a in getattr(model, "aliases", ()) if "/" in a]
    diff = [a for a in ids if a.endswith("-Diffusers") or a.endswith("_diffusers")]
    return (diff or ids or [model.name])[0]


def _uses(plan) -> set[str]:
    return {f for f in FORM_KEYS if plan.degree(f) > 1}


def _fill(text: str, values: dict[str, str], quote=None) -> str:
    """Placeholders replaced by their values; `quote` turns each QUOTED value into an inert literal of the
    text's language (shell word, Python or JSON string), so no name can end the literal and run as code."""
    def value(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in values:
            return m.group(0)
        return quote(values[name]) if quote is not None and name in QUOTED else values[name]

    return _PLACEHOLDER.sub(value, text)


def shell_word(text: str) -> str:
    """One shell word for any text: a safe name as it is, anything else in single quotes."""
    import shlex

    return shlex.quote(text)


def string_literal(text: str) -> str:
    """A double-quoted string literal that Python and JSON both read back as `text` (escapes for quotes,
    backslashes and control characters)."""
    import json

    return json.dumps(text)


def _flags(pieces: list[str]) -> str:
    """'ulysses_size=4' kwargs as the command-line flags a script reads them from: '--ulysses_size 4'."""
    out = []
    for p in pieces:
        for kv in (x.strip() for x in p.split(",")):
            if not kv:
                continue
            k, sep, v = kv.partition("=")
            out.append(f"--{k.strip()} {v.strip()}" if sep else f"--{k.strip()}")
    return " ".join(out)


def slug(plan_name: str) -> str:
    return plan_name.replace(" ", "-")


_TORCHRUN = re.compile(r"\btorchrun --nproc[_-]per[_-]node[= ](\d+)")


def multi_node(launch: str, world: int, per_node: int) -> tuple[str, str]:
    """(launch, note) for a world larger than one node: torchrun gets its multi-node form (one line per node,
    NODE = 0..nodes-1 on each, HOST0 = node 0's address); another launcher keeps its line and gets a note."""
    if per_node <= 0 or world <= per_node:
        return launch, ""
    nodes = -(-world // per_node)
    if _TORCHRUN.search(launch):
        form = (f"torchrun --nnodes {nodes} --node-rank NODE --nproc-per-node {per_node} --master-addr HOST0 "
                "--master-port 29500")
        return (_TORCHRUN.sub(form, launch, count=1),
                f"the plan spans {nodes} nodes of {per_node} cards: run this line on every node with NODE = "
                f"0..{nodes - 1} (its rank) and HOST0 = node 0's address; all nodes see the same files")
    return launch, (f"the plan spans {nodes} nodes of {per_node} cards ({world} processes): this launcher "
                    "starts one node's processes; start it multi-node as its own documentation says")


def render(fw, recipe: Recipe, model, shape, plan, *, pad: bool = False, sharded: bool = False,
           steps: str | None = None, family: str = "", per_node: int = 0, vae: int = 1,
           unlocks: tuple[str, ...] = ()) -> dict:
    """One recipe filled for one plan. `steps` None: the request's step count; '{steps}': left for the
    few-step runner (the launch line then escapes every other brace, as fewstep.py's templates need).
    `per_node`: cards per node; a world larger than that gets the multi-node launch (multi_node)."""
    used = _uses(plan)
    replicas = plan.dp if plan.dp > 1 and "dp" not in recipe.args else 1
    world = plan.devices // replicas
    values = {"model": model.name, "model_id": recipe.models.get(model.name, model_id(model)),
              "steps": _STEPS_MARK if steps == "{steps}" else str(steps or shape.steps),
              "devices": str(plan.devices), "world": str(world), "sp": str(plan.sp),
              "patches": str(plan.num_patches), "warmup": str(plan.warmup), "slug": slug(plan.name),
              "cfg_json": "true" if shape.cfg else "false", "cfg_py": "True" if shape.cfg else "False",
              "width": str(shape.width), "height": str(shape.height), "frames": str(shape.frames),
              "vae": str(max(1, int(vae))),
              "attn2d_rows": str(plan.attn2d_mesh[1]), "attn2d_cols": str(plan.attn2d_mesh[0]),
              **{f: str(plan.degree(f)) for f in FORM_KEYS}}
    values["script"] = recipe.scripts.get(model.name, recipe.scripts.get(family, ""))
    values["video"] = _fill(recipe.video, values) if shape.frames > 1 else ""
    values["video_flags"] = (" " + _flags([values["video"].lstrip(", ")])) if values["video"] else ""
    applies = set(used)
    if pad and "ulysses" in used:
        applies.add("uneven")
    elif pad and ("ring" in used or "kv_allgather" in used):   # diffusers' ring_anything: its ring is the K/V gather
        applies.add("uneven_ring")
    if sharded:
        applies.add("shard")
    if vae > 1:
        applies.add("vae")
    applies |= {UNLOCK_KEYS[u] for u in unlocks if u in UNLOCK_KEYS}
    keys = [k for k in ARG_KEYS if k in applies and k in recipe.args]
    pieces = [p for p in (_fill(recipe.args[k], values) for k in keys) if p]
    values["args"] = recipe.join.join(pieces)
    values["flags"] = _flags(pieces) if recipe.kind != "shell" else values["args"]
    config = _fill(recipe.config, values, string_literal) if recipe.config else ""
    if recipe.kind == "json":
        values["config_inline"] = " ".join(config.split())
    launch = _fill(recipe.launch, values, shell_word)
    launch, nodes_note = multi_node(launch, world, per_node)
    if steps == "{steps}":
        launch = launch.replace("{", "{{").replace("}", "}}").replace(_STEPS_MARK, "{steps}")
        config = config.replace(_STEPS_MARK, "{steps}")
    notes = [nodes_note] if nodes_note else []
    if replicas > 1:
        notes.append(f"data parallel {plan.dp}: {fw.name}'s launcher has no data-parallel degree here; start "
                     f"{plan.dp} copies, each on its own {world} cards (CUDA_VISIBLE_DEVICES or "
                     f"ASCEND_RT_VISIBLE_DEVICES); each serves its own requests")
    if pad and not set(keys) & {"uneven", "uneven_ring"} and plan.sp > 1:
        notes.append(f"the sequence does not divide {plan.sp}: {fw.name} pads it (costed in the prediction)")
    if "{height}" not in recipe.launch + recipe.config and "{width}" not in recipe.launch + recipe.config:
        notes.append(f"this recipe sets no resolution or frame count ({fw.name}'s names for them were not read at the "
                     f"cited commit): set {shape.width}x{shape.height}"
                     + (f", {shape.frames} frames" if shape.frames > 1 else "")
                     + " yourself, else the run uses the framework's default shape")
    if sharded and "shard" not in recipe.args:
        notes.append("the plan fits memory only with layer-wise weight sharding, which this launcher does not set")
    told = {t.partition(": ")[0] for t in recipe.together} | set(recipe.args)
    for u in unlocks:
        if u in UNLOCK_KEYS and UNLOCK_KEYS[u] not in told:
            notes.append(f"the plan fits memory only with {UNLOCK_KEYS[u].replace('_', ' ')}, which this launcher does "
                         f"not set: switch on {fw.name}'s own option for it")
    for u in getattr(fw, "unverified", ()):   # unread entries that bear on this very plan are shown with it
        head = re.split(r"[\s:(]", u.strip(), maxsplit=1)[0]
        if head in used or head == family:
            notes.append(f"unverified in {fw.name}'s profile: {u}")
    return {"framework": fw.name, "recipe": recipe.name, "kind": recipe.kind, "plan": plan.name,
            "config": config, "launch": launch, "world_size": world, "world_rule": recipe.world,
            "together": _together(recipe.together, applies), "notes": notes, "source": recipe.source,
            "read": fw.version, "prove": prove_command(plan)}


def _together(items: tuple[str, ...], applied: set[str]) -> list[str]:
    """Entries 'form: text' apply only when that form (or uneven / shard) is used; others always."""
    out = []
    for t in items:
        key, sep, rest = t.partition(": ")
        if sep and key in ARG_KEYS:
            if key in applied:
                out.append(rest)
        else:
            out.append(t)
    return out


def prove_command(plan) -> str:
    """The scope_probe.py call that checks, after a recorded run, that the degrees took effect."""
    if plan.sp * plan.tp <= 1 or plan.attn2d > 1:   # scope_probe does not know Attention2D's shapes
        return ""
    return f"python scripts/scope_probe.py runs/scope --plan \"{plan.name}\" --baseline runs/scope-1card"


def choose(fw, family: str, plan) -> Recipe | None:
    used = _uses(plan)
    return next((r for r in getattr(fw, "recipes", ()) if r.covers(family, used)), None)


def why_none(fw, family: str, plan) -> str:
    used = sorted(f for f in _uses(plan) if f != "dp")
    if not used:
        return (f"{fw.name}: data parallel only: run {plan.dp} copies of the one-device pipeline, one per card "
                f"(no launch recipe for {family} in its profile)")
    own = getattr(fw, "no_recipe", {}).get(family)
    if own:
        return f"{fw.name}: {own}"
    return f"{fw.name}: no launch recipe in its profile for {'+'.join(used)} on {family}"
