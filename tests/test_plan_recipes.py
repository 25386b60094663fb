"""Launch recipes (issue 28): every recipe renders for every plan its profile claims, every name it takes from a
framework is in the table read at the cited commit, the commands match the frameworks' own examples, and
plan.py / --emit-matrix / fewstep.py run / scope_probe.py use one plan name throughout."""

from __future__ import annotations

import csv
import json
import re
import shlex
from math import gcd

import pytest
from conftest import ROOT, run_script
from ditpar.errors import InputError
from ditpar.plan.cost import make_shape
from ditpar.plan.cost.plans import Plan, enumerate_plans
from ditpar.plan.inputs import frameworks, presets, recipes
from ditpar.plan.inputs.plan_names import parse_plan_name

TABLE = ROOT / "tests" / "data" / "recipe_flags.csv"
UNFILLED = re.compile(r"(?<!\{)\{[a-z_]+\}(?!\})")
HW = {"nvidia": ("H100", 8), "ascend": ("Atlas 800I A2", 8), "amd": ("MI300X", 8)}


def table_rows() -> list[dict]:
    lines = [ln for ln in TABLE.read_text().splitlines() if ln and not ln.startswith("#")]
    return list(csv.DictReader(lines))


def fw(name):
    return frameworks.resolve_frameworks([name])[0]


def model_presets():
    return [presets.resolve_model(p.stem) for p in sorted((ROOT / "templates" / "models").glob("*.toml"))
            if not p.stem.startswith("custom")]


def render_for(name, model_name, plan, **kw):
    f, m = fw(name), presets.resolve_model(model_name)
    family = frameworks.model_family(m)
    rec = recipes.choose(f, family, plan)
    assert rec is not None, f"{name} has no recipe for {plan.name} on {model_name}"
    return recipes.render(f, rec, m, make_shape(m), plan, family=family, **kw)


def pairs(cmd: str) -> set[tuple[str, str]]:
    """--flag value pairs (a bare flag pairs with '') of a command line."""
    toks, out = shlex.split(cmd), set()
    for i, t in enumerate(toks):
        if t.startswith("--"):
            nxt = toks[i + 1] if i + 1 < len(toks) and not toks[i + 1].startswith("--") else ""
            out.add((t, nxt))
    return out


# ------------------------------------------------------------------ every claimed plan renders, nothing left over


def test_every_recipe_renders_for_every_plan_its_profile_claims():
    plans = enumerate_plans(8, True) + enumerate_plans(4, True)
    rendered = 0
    for f in frameworks.all_frameworks():
        for vendor in f.vendors:
            hw_name, n = HW[vendor]
            for m in model_presets():
                family = frameworks.model_family(m)
                shape = make_shape(m)
                hw = presets.resolve_hardware(hw_name, None, n)
                for plan in plans:
                    if frameworks.runs(f, m, hw, shape, plan) is not None:
                        continue
                    rec = recipes.choose(f, family, plan)
                    if rec is None:   # the profile claims it: it must say why it has no launcher
                        why = recipes.why_none(f, family, plan)
                        assert family in f.no_recipe or (plan.sp * plan.tp * plan.cfg * plan.pipefusion == 1
                                                         and "copies" in why), \
                            f"{f.name}: {plan.name} on {m.name} has neither recipe nor reason"
                        continue
                    out = recipes.render(f, rec, m, shape, plan, family=family)
                    text = out["config"] + "\n" + out["launch"]
                    assert not UNFILLED.search(text), f"{f.name} {plan.name} {m.name}: {UNFILLED.search(text)}"
                    assert "{steps}" not in text and str(shape.steps) in text
                    replicas = plan.dp if plan.dp > 1 and "dp" not in rec.args else 1
                    assert out["world_size"] * replicas == plan.devices
                    rendered += 1
    assert rendered > 2000   # every framework, every vendor it lists, two device counts


def test_matrix_mode_leaves_only_the_step_placeholder():
    out = render_for("LightX2V", "Wan2.1-T2V-14B", Plan(cfg=2, ulysses=4), steps="{steps}")
    # fewstep.py's templates: {steps} is the runner's, every literal brace doubled
    assert "{steps}" in out["launch"] and "{{" in out["launch"]
    assert out["launch"].replace("{{", "").replace("}}", "").count("{") == 1


def test_every_profile_names_its_launcher_or_why_not():
    for f in frameworks.all_frameworks():
        assert f.recipes, f"{f.name}: no launch recipe"
        for r in f.recipes:
            assert r.source.split("@")[0] in f.version or r.source.split(":")[0] in f.version


# ------------------------------------------------------------------ the names are those read in the framework


def test_recipe_names_are_in_the_table_read_at_the_commit():
    rows = table_rows()
    assert rows, "tests/data/recipe_flags.csv is empty"
    have = {(r["framework"], r["name"]) for r in rows}
    for f in frameworks.all_frameworks():
        for rec in f.recipes:
            for name in recipes.flag_names(rec):
                assert (f.name, name) in have, f"{f.name} recipe {rec.name!r}: {name} not in {TABLE.name}"
    for r in rows:
        assert re.fullmatch(r"[0-9a-f]{40}", r["commit"]), r
        assert r["line"].isdigit() and int(r["line"]) > 0 or "index" in r["note"], r
        # every row is used by a shipped recipe (a stale row would vouch for nothing)
        f = fw(r["framework"])
        assert any(r["name"] in recipes.flag_names(x) for x in f.recipes), r


def test_the_table_commits_are_the_profiles_commits():
    for r in table_rows():
        f = fw(r["framework"])
        sources = f.version + " ".join(x.source for x in f.recipes) + " ".join(f.sources.values())
        own = r["repo"] in sources
        assert r["commit"][:12] in sources or not own, f"{r['framework']} {r['name']}: commit {r['commit'][:12]}"


def test_flag_names_by_hand():
    x = fw("xDiT").recipes[0]
    assert recipes.flag_names(x) >= {"--ulysses_degree", "--ring_degree", "--use_cfg_parallel", "--model"}
    assert "--nproc_per_node" not in recipes.flag_names(fw("xDiT").recipes[1])   # torchrun's, not xDiT's
    lx = fw("LightX2V").recipes[0]
    assert {"seq_p_size", "seq_p_attn_type", "cfg_p_size", "enable_cfg", "--config_json"} <= recipes.flag_names(lx)
    cd = fw("cache-dit").recipes[0]
    assert recipes.flag_names(cd) >= {"ulysses_size", "ring_size", "tp_size"} and "--ulysses_size" not in recipes.flag_names(cd)


# ------------------------------------------------------------------ commands against the frameworks' own examples


def test_xdit_command_matches_its_readme_example():
    # xDiT README.md L232-241: torchrun --nproc_per_node=8 examples/pixartalpha_example.py --pipefusion_parallel_degree 2
    # --ulysses_degree 2 --use_cfg_parallel (cfg x pf x u = 8)
    out = render_for("xDiT", "PixArt-alpha", Plan(cfg=2, ulysses=2, pipefusion=2))
    assert out["launch"].startswith("torchrun --nproc_per_node=8 examples/pixartalpha_example.py ")
    assert {("--pipefusion_parallel_degree", "2"), ("--ulysses_degree", "2"), ("--use_cfg_parallel", ""),
            ("--num_pipeline_patch", "2"), ("--warmup_steps", "1")} <= pairs(out["launch"])
    runner = render_for("xDiT", "FLUX.1-dev", Plan(ulysses=8))["launch"]   # README.md L210-214
    assert runner.startswith("xdit --model black-forest-labs/FLUX.1-dev ") and ("--ulysses_degree", "8") in pairs(runner)


def test_mindie_sd_command_matches_its_wan_script():
    # examples/wan/infer_t2v.sh: torchrun --nproc_per_node=8 generate.py --task t2v-14B ... --sample_steps 50 --ulysses_size 8
    out = render_for("MindIE-SD", "Wan2.1-T2V-14B", Plan(ulysses=8))
    assert out["launch"].startswith("torchrun --nproc_per_node=8 generate.py ")
    assert {("--task", "t2v-14B"), ("--sample_steps", "50"), ("--ulysses_size", "8")} <= pairs(out["launch"])
    cfg = render_for("MindIE-SD", "Wan2.1-T2V-14B", Plan(cfg=2, ulysses=4))
    assert {("--cfg_size", "2"), ("--ulysses_size", "4")} <= pairs(cfg["launch"])   # 2 x 4 = nproc 8 (worker.py L357)


def test_lightx2v_parallel_block_matches_its_dist_config():
    # configs/dist_infer/wan_t2v_dist_cfg_ulysses.json: "enable_cfg": true, "parallel": {seq_p_size 4, ulysses, cfg_p_size 2}
    out = render_for("LightX2V", "Wan2.1-T2V-14B", Plan(cfg=2, ulysses=4))
    doc = json.loads(out["config"])
    assert doc["parallel"] == {"seq_p_size": 4, "seq_p_attn_type": "ulysses", "cfg_p_size": 2}
    assert doc["enable_cfg"] is True and doc["infer_steps"] == 50
    inline = shlex.split(out["launch"])[2]
    assert json.loads(inline) == doc and "--model_cls" in out["launch"] and "wan2.1" in out["launch"]
    ring = json.loads(render_for("LightX2V", "Wan2.1-T2V-14B", Plan(ring=8))["config"])
    assert ring["parallel"] == {"seq_p_size": 8, "seq_p_attn_type": "ring"}


def test_python_recipes_match_the_documented_calls():
    # diffusers distributed_inference.md L330: ContextParallelConfig(ulysses_degree=2, ring_degree=2); diffusers'
    # ring is the K/V all-gather form (rotate_method 'allgather' only), so the plan is U2 AG2
    assert "ContextParallelConfig(ulysses_degree=2, ring_degree=2)" in render_for(
        "diffusers-CP", "FLUX.1-dev", Plan(ulysses=2, kv_allgather=2))["config"]
    assert "TensorParallelConfig(tp_degree=4)" in render_for("diffusers-CP", "FLUX.1-dev", Plan(tp=4))["config"]
    # cache-dit HYBRID_PARALLEL.md: ParallelismConfig(ulysses_size=4, tp_size=2)
    cd = render_for("cache-dit", "FLUX.1-dev", Plan(ulysses=4, tp=2))
    assert "ParallelismConfig(ulysses_size=4, tp_size=2)" in cd["config"]
    assert {("--ulysses_size", "4"), ("--tp_size", "2")} <= pairs(cd["launch"])
    # vLLM-Omni sequence_parallel.md: DiffusionParallelConfig(ulysses_degree=2, ring_degree=2)
    vo = render_for("vLLM-Omni", "Qwen-Image", Plan(ulysses=2, ring=2))["config"]
    assert "DiffusionParallelConfig(ulysses_degree=2, ring_degree=2)" in vo and 'model="Qwen/Qwen-Image"' in vo
    assert "cfg_parallel_size=2" in render_for("vLLM-Omni", "Wan2.2-T2V-A14B", Plan(cfg=2, ulysses=4))["config"]


def _para_attn_mesh(world: int, max_batch: int | None, max_ulysses: int) -> tuple[int, int, int]:
    """init_context_parallel_mesh (para_attn/context_parallel/__init__.py L16-38), written out again."""
    batch = 1 if max_batch is None else gcd(world, max_batch)
    ulysses = gcd(world // batch, max_ulysses)
    return batch, world // batch // ulysses, ulysses


@pytest.mark.parametrize("plan", [Plan(cfg=2, ulysses=2, ring=2), Plan(ring=8), Plan(ulysses=4, ring=2),
                                  Plan(cfg=2, ring=4)])
def test_para_attention_sizes_give_the_plan_degrees(plan):
    cfg_text = render_for("ParaAttention", "HunyuanVideo", plan)["config"]
    mu = int(re.search(r"max_ulysses_dim_size=(\d+)", cfg_text).group(1))
    mb = re.search(r"max_batch_dim_size=(\d+)", cfg_text)
    assert _para_attn_mesh(plan.devices, int(mb.group(1)) if mb else None, mu) == (plan.cfg, plan.ring, plan.ulysses)


def test_sglang_ring_sets_the_backend_it_needs():
    out = render_for("SGLang-diffusion", "Wan2.1-T2V-14B", Plan(ulysses=2, ring=2))
    assert {("--ulysses-degree", "2"), ("--ring-degree", "2"), ("--attention-backend", "fa3"),
            ("--num-gpus", "4")} <= pairs(out["launch"])


def test_an_indivisible_sequence_sets_the_frameworks_uneven_switch():
    # Qwen-Image 1328x1328: 6889 tokens, not a multiple of 8 (ContextParallelConfig L62-68: ulysses_anything needs
    # ring 1, ring_anything needs ulysses 1; cache-dit's UAA is a Ulysses switch)
    u8 = render_for("diffusers-CP", "Qwen-Image", Plan(ulysses=8), pad=True)["config"]
    assert "ContextParallelConfig(ulysses_degree=8, ulysses_anything=True)" in u8
    r8 = render_for("diffusers-CP", "Qwen-Image", Plan(kv_allgather=8), pad=True)["config"]
    assert "ContextParallelConfig(ring_degree=8, ring_anything=True)" in r8
    assert "anything" not in render_for("diffusers-CP", "Qwen-Image", Plan(kv_allgather=8))["config"]
    cd = render_for("cache-dit", "Qwen-Image", Plan(ring=8), pad=True)
    assert "ulysses_anything" not in cd["config"] and any("pads it" in n for n in cd["notes"])


def test_together_shows_only_what_applies():
    u = render_for("xDiT", "PixArt-alpha", Plan(ulysses=8))
    assert not any("PipeFusion" in t or "use_cfg_parallel" in t for t in u["together"])
    pf = render_for("xDiT", "PixArt-alpha", Plan(pipefusion=8))
    assert any("--warmup_steps" in t for t in pf["together"])


def test_dp_without_a_degree_flag_runs_replicas():
    out = render_for("cache-dit", "FLUX.1-dev", Plan(ulysses=4, dp=2))
    assert out["world_size"] == 4 and "--nproc_per_node=4" in out["launch"]
    assert any("start 2 copies" in n for n in out["notes"])
    vo = render_for("vLLM-Omni", "Qwen-Image", Plan(ulysses=4, dp=2))
    assert vo["world_size"] == 8 and "data_parallel_size=2" in vo["config"]


# ------------------------------------------------------------------ capabilities that changed (issue 23 point 5)


def test_vllm_omni_runs_wan22_plans_its_own_page_measures():
    m = presets.resolve_model("Wan2.2-T2V-A14B")
    hw, shape = presets.resolve_hardware("H100", None, 8), make_shape(presets.resolve_model("Wan2.2-T2V-A14B"))
    vo = fw("vLLM-Omni")
    for plan in (Plan(ulysses=8), Plan(cfg=2, ulysses=4), Plan(ring=8), Plan(tp=8)):
        assert frameworks.runs(vo, m, hw, shape, plan) is None, plan.name
    doc = json.loads(run_script("plan.py", "--model", "Wan2.2-T2V-A14B", "--hardware", "H100", "--devices", "8",
                                "--framework", "vLLM-Omni", "--json", check=0).stdout)
    assert doc["plans"][0]["framework"] == "vLLM-Omni" and doc["plans"][0]["run_recipe"]["framework"] == "vLLM-Omni"


def test_unverified_entries_that_bear_on_the_plan_are_shown():
    out = render_for("vLLM-Omni", "Wan2.1-T2V-14B", Plan(ulysses=8))
    assert any(n.startswith("unverified in vLLM-Omni's profile: wan:") for n in out["notes"])
    assert not any("unverified" in n for n in render_for("vLLM-Omni", "Qwen-Image", Plan(ulysses=8))["notes"])


def test_xdit_cfg_for_wan_only_where_its_runner_has_it():
    xdit = fw("xDiT")
    hw = presets.resolve_hardware("H100", None, 8)
    t2v, i2v = presets.resolve_model("Wan2.1-T2V-14B"), presets.resolve_model("Wan2.1-I2V-14B")
    why = frameworks.runs(xdit, t2v, hw, make_shape(t2v), Plan(cfg=2, ulysses=4))
    assert why is not None and "cfg" in why and "Wan2.1-T2V-14B" in why
    assert frameworks.runs(xdit, i2v, hw, make_shape(i2v), Plan(cfg=2, ulysses=4)) is None
    assert frameworks.runs(xdit, t2v, hw, make_shape(t2v), Plan(ulysses=8)) is None


def test_diffusers_does_not_combine_tp_with_context_parallel():
    m = presets.resolve_model("FLUX.1-dev")
    hw = presets.resolve_hardware("H100", None, 8)
    assert frameworks.runs(fw("diffusers-CP"), m, hw, make_shape(m), Plan(ulysses=4, tp=2)) == \
        "tp does not combine with ulysses"


# ------------------------------------------------------------------ plan.py, --emit-matrix, fewstep.py run


FLUX8 = ["--model", "FLUX.1-dev", "--hardware", "H100", "--devices", "8"]


def test_plan_prints_a_recipe_for_rank_one_and_the_short_list():
    doc = json.loads(run_script("plan.py", *FLUX8, "--json", check=0).stdout)
    feas = [p for p in doc["plans"] if p["feasible"]]
    assert all(p["run_recipe"] and p["run_recipe"]["framework"] == p["framework"] for p in feas)
    assert all(p["run_recipe"] is None for p in doc["plans"] if not p["feasible"])
    text = run_script("plan.py", *FLUX8, check=0).stdout
    for name in doc["short_list"]:
        plan = next(p for p in feas if p["name"] == name)
        rec = plan["run_recipe"]
        head = f"{name} ({plan['head_split']})" if plan["head_split"] else name   # a Ulysses plan: its head split
        assert f"{head}: run it on {rec['framework']}" in text and rec["launch"] in text


def test_framework_flag_selects_the_recipe():
    doc = json.loads(run_script("plan.py", *FLUX8, "--framework", "diffusers-CP", "--json", check=0).stdout)
    first = doc["plans"][0]["run_recipe"]
    assert first["framework"] == "diffusers-CP" and first["recipe"] in ("ContextParallelConfig", "TensorParallelConfig")


def test_a_plan_without_a_launcher_says_so():
    proc = run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", "Atlas 800I A2", "--devices", "8",
                      "--framework", "MindIE-SD", check=0)
    assert "no recipe: MindIE-SD: no launcher for FLUX.1-dev" in proc.stdout
    assert "run it on" not in proc.stdout


def test_emit_matrix_writes_each_plans_own_launch(tmp_path):
    out = tmp_path / "m.csv"
    doc = json.loads(run_script("plan.py", *FLUX8, "--emit-matrix", str(out), "--json", check=0).stdout)
    rows = list(csv.DictReader(out.open()))
    by_fw = {}
    for r in rows:
        by_fw.setdefault(r["framework"], set()).add(r["launch"])
        assert f"--num_inference_steps {r['steps']}" in r["launch"]       # the row's own step count
        assert r["tags"].startswith(f"framework={r['framework']};")
    assert len(by_fw) >= 2, "the FLUX.1-dev short list on 8 x H100 mixes frameworks"
    launches = [next(iter(v)) for v in by_fw.values()]
    assert len(set(launches)) == len(launches)
    assert doc["matrix"]["frameworks"] == sorted(by_fw) and "mixed frameworks" in doc["matrix"]["notes"][0]
    cmd = shlex.split(doc["matrix"]["command"])
    assert sum(t.startswith("launch=") for t in cmd) == len(doc["matrix"]["configs"])
    assert "--launch" not in cmd                                         # every plan has its own command


def test_fewstep_runs_each_configs_own_launch_over_an_emitted_skeleton(tmp_path):
    out = tmp_path / "m.csv"
    run_script("plan.py", *FLUX8, "--emit-matrix", str(out), check=0)
    work = "python tests/data/fewstep_workload.py once --ranks 2 --steps {steps} --per-step-s "
    proc = run_script("fewstep.py", "run",
                      "--config", "A", "devices=2", "framework=xDiT", "ulysses=2", f"launch={work}0.10 --seed a",
                      "--config", "B", "devices=2", "framework=cache-dit", "tp=2", f"launch={work}0.12 --seed b",
                      "--few-steps", "4", "--anchor-steps", "10", "--repeats", "3", "--matrix", str(out),
                      "--logdir", str(tmp_path / "runs"), "--dit-regex",
                      r"\[rank(?P<rank>\d+)\] DiT denoise took (?P<dit_s>[0-9.]+)s", "--json", cwd=ROOT, check=0)
    doc = json.loads(proc.stdout)
    assert doc["verdict"] == "extrapolate", proc.stderr
    rows = list(csv.DictReader(out.open()))
    assert {r["config"] for r in rows} == {"A", "B"} and all(r["dit_s"] for r in rows)
    per = {c: sorted(float(r["dit_s"]) / int(r["steps"]) for r in rows if r["config"] == c and r["rank"] == "0")
           for c in ("A", "B")}
    assert per["A"][0] == pytest.approx(0.10, rel=0.01) and per["B"][0] == pytest.approx(0.12, rel=0.01)
    meta = json.loads(next((tmp_path / "runs" / "B" / "runs").glob("few-r1.json")).read_text())
    assert "--per-step-s 0.12 --seed b" in meta["command"]


def test_fewstep_run_needs_a_launch_for_every_config(tmp_path):
    proc = run_script("fewstep.py", "run", "--config", "A", "devices=2", "launch=echo {steps}",
                      "--config", "B", "devices=2", "--few-steps", "4", "--anchor-steps", "10",
                      "--logdir", str(tmp_path), "--dit-regex", "(?P<dit_s>x)", check=2)
    assert "config(s) ['B'] have no launch= field" in proc.stderr


# ------------------------------------------------------------------ one plan name for recipe, matrix and probe


def test_plan_names_read_back():
    assert parse_plan_name("cfg2 U4 R2") == {"cfg": 2, "ulysses": 4, "ring": 2, "kv_allgather": 1, "attn2d": 1,
                                             "tp": 1, "pipefusion": 1, "dp": 1, "patches": 1}
    assert parse_plan_name("cfg2-U2-AG2")["kv_allgather"] == 2 and parse_plan_name("single")["ulysses"] == 1
    assert parse_plan_name("cfg2 U2 A2D9") == {**parse_plan_name("cfg2 U2"), "attn2d": 9}
    for p in enumerate_plans(8, True, patches=4):
        d = parse_plan_name(p.name)
        assert Plan(**{k: d[k] for k in ("cfg", "ulysses", "ring", "kv_allgather", "attn2d", "tp", "pipefusion",
                                          "dp")},
                    patches=4 if p.pipefusion > 1 else 0).name == p.name
    with pytest.raises(InputError, match="not a degree"):
        parse_plan_name("U4 X2")
    with pytest.raises(InputError, match="twice"):
        parse_plan_name("U4 U2")


def test_scope_probe_takes_the_plan_name(tmp_path):
    # cfg2 U2 R2 on 8 ranks, 4096 tokens, 24 heads: each rank holds 4096 / (2 x 2) tokens at the input and,
    # after the Ulysses all-to-all, 4096 / 2 tokens of 24 / 2 heads in the core (ring keeps its share)
    for rank in range(8):
        core = [1, 2048, 12, 128]
        lines = [{"schema": "dit-parallel-opt/scope/v1", "rank": rank, "world_size": 8, "name": "attn",
                  "stage": "input", "layout": "BSHD", "q": [1, 1024, 24, 128], "k": None, "v": None},
                 {"schema": "dit-parallel-opt/scope/v1", "rank": rank, "world_size": 8, "name": "attn.core",
                  "stage": "core", "layout": "BSHD", "q": core, "k": core, "v": core}]
        (tmp_path / f"scope-rank{rank}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    ok = json.loads(run_script("scope_probe.py", str(tmp_path), "--plan", "cfg2 U2 R2", "--full-seq", "4096",
                               "--heads", "24", "--json", check=0).stdout)
    assert ok["plan"] == {"ulysses": 2, "ring": 2, "kv_allgather": 1, "tp": 1} and ok["verdict"] == "sharded"
    wrong = json.loads(run_script("scope_probe.py", str(tmp_path), "--plan", "cfg2 U4", "--full-seq", "4096",
                                  "--heads", "24", "--json", check=1).stdout)
    assert wrong["verdict"] != "sharded"       # the degrees of another plan do not fit these shapes
    bad = run_script("scope_probe.py", str(tmp_path), "--plan", "cfg2 U2 R2", "--ulysses", "4", "--full-seq", "4096",
                     "--heads", "24", check=2)
    assert "has ulysses 2, --ulysses says 4" in bad.stderr
    pf = run_script("scope_probe.py", str(tmp_path), "--plan", "PF8", "--full-seq", "4096", check=2)
    assert "PipeFusion" in pf.stderr


def test_recipe_prove_line_uses_the_printed_name():
    out = render_for("xDiT", "FLUX.1-dev", Plan(ulysses=4, ring=2))
    assert '--plan "U4 R2"' in out["prove"]
    assert render_for("xDiT", "FLUX.1-dev", Plan(pipefusion=8))["prove"] == ""


# ------------------------------------------------------------------ round 3: column and recipe agree, process counts


@pytest.mark.parametrize("model", ["mochi-1", "FLUX.1-dev"])
def test_the_framework_column_is_the_framework_whose_recipe_is_printed(model):
    # xDiT runs Mochi-1 (Ulysses is model-agnostic) but only from mochi-xdit: the column named xDiT while the
    # recipe printed was ParaAttention's; the ranking now names a framework that has a recipe where one does
    doc = json.loads(run_script("plan.py", "--model", model, "--hardware", "H100", "--devices", "8", "--json",
                                check=0).stdout)
    feas = [p for p in doc["plans"] if p["feasible"] and p["run_recipe"]]
    assert feas
    assert all(p["run_recipe"]["framework"] == p["framework"] for p in feas)
    assert all(p["run_recipe"].get("framework") for p in feas)


def test_fewer_bench_processes_than_cards_are_explained():
    from ditpar.plan.cost.timing import Tunables
    from ditpar.plan.decide.shortlist import measure_command, processes_note

    hw = presets.resolve_hardware("H100")
    plans = [Plan(ulysses=2, ring=2), Plan(ulysses=4)]     # a 4-card pair on an 8-card box
    sens = {"pattern": "alltoall", "link": "intra_domain"}
    cmd = measure_command(hw, plans, sens, Tunables())
    n = int(re.search(r"--nproc-per-node (\d+)", cmd).group(1))
    note = processes_note(hw, plans, sens, Tunables())
    assert n < 8 and note.startswith(f"{n} processes, not 8, on purpose") and f"other {8 - n} cards stay idle" in note
    full = [Plan(ulysses=8), Plan(tp=8)]
    assert processes_note(hw, full, {"pattern": "all", "link": "intra_domain"}, Tunables()) == ""
    assert processes_note(hw, full, {"pattern": "compute", "link": None}, Tunables()) == ""


def test_the_head_rule_reads_the_right_way_round():
    text = (ROOT / "templates" / "frameworks" / "mindie-sd.toml").read_text()
    assert "heads must divide ulysses_size" not in text
    assert "ulysses_size must divide the head count" in text


def test_a_plan_that_spans_nodes_gets_the_multi_node_launch():
    line, note = recipes.multi_node("torchrun --nproc_per_node=16 run.py --x 1", 16, 8)
    assert line.startswith("torchrun --nnodes 2 --node-rank NODE --nproc-per-node 8 --master-addr HOST0 "
                           "--master-port 29500 run.py --x 1")
    assert "NODE = 0..1" in note
    assert recipes.multi_node("torchrun --nproc_per_node=8 run.py", 8, 8) == ("torchrun --nproc_per_node=8 run.py", "")
    line, note = recipes.multi_node("xdit --model m --ulysses_degree 16", 16, 8)
    assert line == "xdit --model m --ulysses_degree 16" and "spans 2 nodes" in note
    doc = json.loads(run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", "H100, 2 nodes", "--devices", "16",
                                "--json", check=0).stdout)
    recs = [p["run_recipe"] for p in doc["plans"] if p["feasible"] and p["run_recipe"]
            and p["run_recipe"].get("framework") and p["run_recipe"]["world_size"] > 8]
    assert recs
    for rec in recs:
        assert "--nproc_per_node=16" not in rec["launch"] and "--nproc-per-node=16" not in rec["launch"]
        if "torchrun" in rec["launch"]:
            assert "--nnodes 2 --node-rank NODE --nproc-per-node 8" in rec["launch"]
        assert any("spans 2 nodes" in n for n in rec["notes"])


@pytest.mark.parametrize("name", ["xDiT", "cache-dit", "diffusers-CP", "ParaAttention", "SGLang-diffusion", "MindIE-SD", "LightX2V"])
def test_a_copied_recipe_runs_the_requested_shape_not_the_framework_default(name):
    for model_name, plan in (("FLUX.1-dev", Plan(ulysses=2)), ("Wan2.1-T2V-14B", Plan(ulysses=2))):
        m = presets.resolve_model(model_name)
        if recipes.choose(fw(name), frameworks.model_family(m), plan) is None:
            continue
        shape = make_shape(m)
        rec = render_for(name, model_name, plan)
        text = rec["launch"] + "\n" + rec["config"]
        assert f"{shape.height}" in text and f"{shape.width}" in text
        assert bool(re.search(r"num[_-]frames|frame_num|video_length", text)) == (shape.frames > 1), text
        if rec["kind"] == "json":     # LightX2V: the config block the launch line writes
            assert f'"target_height": {shape.height}, "target_width": {shape.width}' in rec["config"]
            assert shape.frames == 1 or f'"target_video_length": {shape.frames}' in rec["config"]
            continue
        if shape.frames > 1:
            assert re.search(rf"--(num[_-]frames|frame_num) {shape.frames}\b", rec["launch"])
        assert (f"--height {shape.height} --width {shape.width}" in rec["launch"]
                or f"--size {shape.width}*{shape.height}" in rec["launch"].replace("'", ""))


def test_parallel_vae_is_named_where_the_profile_read_it():
    """Every profile that splits the decode lists the families and says how in each recipe: an argument the plan's
    split sets ({vae}: the cards of the request) or a 'vae:' line printed with it."""
    for name in ("xDiT", "vLLM-Omni", "ParaAttention", "cache-dit", "MindIE-SD", "LightX2V"):
        f = fw(name)
        assert f.vae_parallel and f.vae_parallel_families and "vae_parallel_families" in f.sources, name
        assert all("vae" in r.args or any(t.startswith("vae: ") for t in r.together) for r in f.recipes), name
    assert fw("vLLM-Omni").recipes[0].args["vae"] == "vae_patch_parallel_size={vae}"
    rec = render_for("vLLM-Omni", "Wan2.1-T2V-14B", Plan(ulysses=4), vae=4)
    assert "vae_patch_parallel_size=4" in rec["config"] and any("DiT group" in t for t in rec["together"])
    assert "vae_patch_parallel_size" not in render_for("vLLM-Omni", "Wan2.1-T2V-14B", Plan(ulysses=4))["config"]


def test_a_recipe_without_shape_names_says_so():
    rec = render_for("vLLM-Omni", "Wan2.1-T2V-14B", Plan(ulysses=2))
    assert any("sets no resolution or frame count" in n and "1280x720, 81 frames" in n for n in rec["notes"])
    rec = render_for("xDiT", "FLUX.1-dev", Plan(ulysses=2))
    assert not any("sets no resolution" in n for n in rec["notes"])
