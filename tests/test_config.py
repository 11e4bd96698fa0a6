"""Composition of every config option, the plan's command lines, and rejected configs."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from conftest import plan_text
from specrepro.core.campaign import Campaign
from specrepro.serving.plan_text import warnings as plan_warnings
from specrepro.core.config import CONF_DIR, PROJECT_ROOT, ConfigError, compose

GROUPS = {g: sorted(p.stem for p in (CONF_DIR / g).glob("*.yaml")) for g in ("model", "platform", "sglang", "experiment", "bench")}


@pytest.mark.parametrize("group,option", [(g, o) for g in ("model", "platform", "sglang", "experiment") for o in GROUPS[g]])
def test_every_option_composes(group, option):
    # a platform composes with a model whose checkpoint runs there
    extra = ["model=glm52_fp8"] if (group, option) in (("platform", "h200"), ("platform", "gpu_local")) else []
    cfg = compose([f"{group}={option}", *extra])
    # the option chosen is the option composed (file names and the names inside them agree)
    composed = {"model": cfg["model"]["name"], "platform": cfg["platform"]["name"],
                "sglang": "v" + cfg["sglang"]["version"].replace(".", "_"), "experiment": cfg["experiment"]["name"]}
    assert composed[group] == option
    plan = plan_text(cfg)
    assert plan.count("server: ") == len(cfg["experiment"]["arms"])


@pytest.mark.parametrize("option", GROUPS["bench"])
def test_every_bench_option_composes(option):
    from specrepro.benchmarks import kinds

    # SPEED-Bench's prepared file is not published (conf/config.yaml's data.speed_bench): the committed toy file
    data = [f"benchmarks.extra_{option}.speed_bench.dataset=speed_bench_toy"] if option == "speed_bench" else []
    cfg = compose([f"+bench@benchmarks.extra_{option}={option}", *data])
    assert cfg["benchmarks"][f"extra_{option}"]["kind"] in kinds()


SEED = PROJECT_ROOT.parent / "shared" / "seed" / "eagle-topk-pr.md"


def test_seed_campaign_matches_the_seed_document():
    """The default campaign against the PR text itself: its server command, workloads and tables."""
    import re
    import shlex

    text = SEED.read_text()
    cfg = compose()
    plan = plan_text(cfg)
    command = re.search(r"python3 -m sglang.launch_server \\\n(.*?)\n\n", text, re.S).group(1).replace("\\\n", " ")
    seed_args = shlex.split(command)
    canonical = {"--tp": "--tp-size"}
    pr_line = _server_line(plan, "pr_rs_on")
    for i, arg in enumerate(seed_args):
        if not arg.startswith("--") or arg == "--model-path":
            continue
        value = seed_args[i + 1] if i + 1 < len(seed_args) and not seed_args[i + 1].startswith("--") else None
        flag = canonical.get(arg, arg)
        assert (f"{flag} {value}" if value else flag) in pr_line, arg
    # GSM8K 200q 5-shot temperature=0, concurrency 8; bench_serving random 1024/512, 12 prompts, concurrency 1
    g, s = cfg["benchmarks"]["gsm8k"]["gsm8k"], cfg["benchmarks"]["bench_serving"]["serving"]
    assert "GSM8K 200q 5-shot temperature=0, concurrency 8" in text
    assert (g["num_questions"], g["num_shots"], g["temperature"], g["parallel"]) == (200, 5, 0.0, 8)
    assert "random 1024/512, 12 prompts, concurrency 1" in text
    assert (s["dataset_name"], s["input_len"], s["output_len"], s["num_prompts"], s["max_concurrency"]) == \
        ("random", 1024, 512, 12, 1)
    # every figure of the seed's two tables is the reference figure of its arm
    ref = cfg["experiment"]["reference"]
    rows = {"main, rejection sampling off": "main_rs_off", "main, rejection sampling on": "main_rs_on",
            "+ this PR, rejection sampling on": "pr_rs_on"}
    seen = 0
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("\t")]
        if cells[0] in rows and len(cells) in (3, 4):
            arm = rows[cells[0]]
            if "ms" in cells[1]:
                assert ref[arm]["bench_serving"] == {"mean_tpot_ms": float(cells[1].split()[0]),
                                                     "output_throughput": float(cells[2])}
            else:
                assert ref[arm]["gsm8k"] == {"accept_length": float(cells[1]), "accuracy": float(cells[2]),
                                             "invalid_rate": float(cells[3])}
            seen += 1
    assert seen == 6


SEED_FLAGS = [
    "--speculative-algorithm EAGLE", "--speculative-num-steps 5", "--speculative-eagle-topk 1",
    "--speculative-num-draft-tokens 6", "--tp-size 4", "--ep-size 4", "--kv-cache-dtype fp8_e4m3",
    "--dsa-prefill-backend tilelang", "--dsa-decode-backend tilelang", "--max-running-requests 8",
    "--cuda-graph-max-bs-decode 8", "--trust-remote-code",
]


def _server_line(plan: str, arm: str) -> str:
    section = plan.split(f"## arm {arm}:")[1]
    return next(line for line in section.splitlines() if line.startswith("server: "))


def test_plan_server_commands_carry_the_seed_flags():
    plan = plan_text(compose())
    pr = _server_line(plan, "pr_rs_on")
    off = _server_line(plan, "main_rs_off")
    for flag in SEED_FLAGS:
        assert flag in pr, flag
        assert flag in off, flag
    assert "--speculative-use-rejection-sampling" in pr
    assert "--speculative-use-rejection-sampling" not in off
    assert "--disable-cuda-graph" in _server_line(plan, "pr_rs_on_nocg")
    assert "-m sglang.launch_server" in pr
    assert " --tp " not in pr  # canonical spellings only


def test_plan_cli_prints_commands_and_dag(tmp_path):
    out = subprocess.run([sys.executable, "-m", "specrepro.cli", "plan", f"results_dir={tmp_path}"],
                         capture_output=True, text=True, cwd=PROJECT_ROOT)
    assert out.returncode == 0, out.stderr
    assert "server: " in out.stdout and "sglang.benchmark.serving" in out.stdout
    assert "serve_bench" in out.stdout and "patch_check" in out.stdout
    assert not any(tmp_path.iterdir()), "plan must not run or write anything"


def test_other_model_and_external_model_dir(tmp_path):
    cfg = compose(["model=llama31_8b_eagle3"])
    assert "--speculative-algorithm EAGLE3" in _server_line(plan_text(cfg), "pr_rs_on")
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "my_qwen.yaml").write_text(textwrap.dedent("""
        name: my_qwen
        gpus: 2
        server_args:
          model_path: /models/qwen
          tp_size: 2
          speculative_algorithm: EAGLE
          speculative_num_steps: 3
    """))
    cfg = compose([f"hydra.searchpath=[file://{tmp_path}]", "model=my_qwen"])
    line = _server_line(plan_text(cfg), "main_rs_off")
    assert "--model-path /models/qwen" in line and "--tp-size 2" in line


BAD = [
    (["model=no_such_model"], "model"),
    (["platform=tpu"], "platform"),
    (["experiment.repeats=0"], "experiment.repeats"),
    (["experiment.repeats=three"], "could not be converted to Integer"),
    (["serve.port=80"], "serve.port"),
    (["serve.port=70000"], "serve.port"),
    (["experiment.baseline_arm=nope"], "experiment.baseline_arm"),
    (["experiment.arms.pr_rs_on.patch_series=missing"], "experiment.arms.pr_rs_on.patch_series"),
    (["experiment.arms.pr_rs_on.benchmarks=[gsm8k,mmlu]"], "'mmlu' is not a defined benchmark"),
    (["+model.server_args.tp=4"], "did you mean --tp-size"),
    (["+model.server_args.no_such_flag=1"], "--no-such-flag"),
    (["+experiment.arms.pr_rs_on.extra_server_args.speculative_use_rejection_samplin=true"],
     "did you mean --speculative-use-rejection-sampling"),
    (["model.server_args.trust_remote_code=yes"], "is a switch"),
    (["+model.server_args.port=1234"], "set by specrepro"),
    (["model.gpus=16"], "model.gpus"),
    (["platform.container_runtime=lxc"], "platform.container_runtime"),
    (["benchmarks.gsm8k.gsm8k.num_questions=0"], "benchmarks.gsm8k.gsm8k.num_questions"),
    (["benchmarks.bench_serving.serving.range_ratio=1.5"], "range_ratio"),
    (["benchmarks.gsm8k.kind=mmlu"], "benchmarks.gsm8k.kind"),
    (["experiment.repeets=3"], "Key 'repeets' not in 'ExperimentConfig'"),
    (["sglang.version=9.9.9"], "sglang.version"),
    (["experiment.patch_series.eagle_topk=patches/nowhere"], "experiment.patch_series.eagle_topk: "),
    (["experiment=eagle_topk_cpu", "+experiment.theory.main_rs_on.gsm8k.verify=rejection"],
     "experiment.theory.main_rs_on.gsm8k: verify"),
    (["experiment=eagle_topk_cpu", "+experiment.theory.main_rs_on.gsm8k.draft_temprature=1"], "draft_temprature"),
    (["experiment=eagle_topk_cpu", "experiment.theory.main_rs_on.gsm8k={draft_temperature: -1}"],
     "experiment.theory.main_rs_on.gsm8k.draft_temperature"),
    (["experiment=eagle_topk_cpu", "model=llama31_8b_eagle3"],
     "experiment.theory.main_rs_off.gsm8k.acceptance: model llama31_8b_eagle3 is not built by the pipeline"),
    (["benchmarks.gsm8k.gsm8k.test_data=gsm8k_v2"], "benchmarks.gsm8k.gsm8k.test_data: 'gsm8k_v2' is not a data entry"),
    (["offline=true", "data.gsm8k.path=/nowhere/test.jsonl"], "data.gsm8k.path: /nowhere/test.jsonl is not there"),
    (["model.name=???"], "model.name: Missing mandatory value"),
    (["experiment.name=../escape"], "experiment.name"),
    (["+foo=1"], "Key 'foo' not in 'SpecreproConfig'"),
    (["results_dir="], "results_dir: '' is empty or a root folder"),
    (["results_dir=/"], "results_dir: '/' is empty or a root folder"),
    (["~experiment.arms.main_rs_on_nocg"], "claim 'nocg_fixed_without_patch': arm 'main_rs_on_nocg' is not an arm"),
    (["experiment.skip_claims=[no_such_claim]"], "experiment.skip_claims: ['no_such_claim'] are not claims"),
]


@pytest.mark.parametrize("overrides,expected", BAD, ids=[b[1] for b in BAD])
def test_bad_config_is_rejected_naming_the_key(overrides, expected):
    """As every entry point composes: the config, then its claims file held to it (analysis.claims)."""
    from specrepro.analysis.claims import check_campaign_claims

    with pytest.raises(ConfigError) as info:
        check_campaign_claims(compose(overrides))
    assert expected in str(info.value)


def test_cli_rejects_bad_config_with_nonzero_exit():
    out = subprocess.run([sys.executable, "-m", "specrepro.cli", "plan", "experiment.repeats=0"],
                         capture_output=True, text=True, cwd=PROJECT_ROOT)
    assert out.returncode == 2
    assert "experiment.repeats" in out.stderr and "Traceback" not in out.stderr


def test_typo_in_a_users_model_file_is_rejected(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "typo.yaml").write_text("name: typo\ngpu: 2\nserver_args: {model_path: /m}\n")
    with pytest.raises(ConfigError) as info:
        compose([f"hydra.searchpath=[file://{tmp_path}]", "model=typo"])
    assert "gpu" in str(info.value)


def test_claims_file_is_checked_against_the_experiment_before_any_job(tmp_path):
    claims = tmp_path / "claims.yaml"
    claims.write_text(textwrap.dedent("""
        claims:
          - {id: a, benchmark: gsm8k, metric: accept_lenght, arm: pr_rs_on, against: main_rs_on, expect: increase}
          - {id: b, benchmark: gsm8k, metric: accuracy, arm: pr_rs_onn, against: main_rs_on, expect: equal}
          - {id: c, benchmark: gsm8k, metric: accuracy, arm: pr_rs_on, against: main_rs_on, expect: bigger}
    """))
    out = subprocess.run([sys.executable, "-m", "specrepro.cli", "plan", f"experiment.claims={claims}"],
                         capture_output=True, text=True, cwd=PROJECT_ROOT)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "claim 'a'.metric: 'accept_lenght' is not a metric a gsm8k benchmark records" in out.stderr
    assert "claim 'b': arm 'pr_rs_onn' is not an arm of this experiment" in out.stderr
    assert "claim 'c'.expect: 'bigger' is not one of" in out.stderr


def test_platform_refuses_a_model_that_does_not_run_there():
    with pytest.raises(ConfigError) as info:
        compose(["platform=h200"])
    message = str(info.value)
    assert "conf/model/glm52_mxfp4.yaml" in message and "conf/platform/h200.yaml" in message
    plan = plan_text(compose(["platform=h200", "model=glm52_fp8"]))
    assert "--tp-size 8" in _server_line(plan, "pr_rs_on") and "--gpus" in _server_line(plan, "pr_rs_on")


def test_plan_warns_of_the_amd_eagle_all_reduce_hazard():
    warnings = plan_warnings(Campaign(compose(["benchmarks.gsm8k.gsm8k.parallel=16"])))
    assert any("--disable-custom-all-reduce" in w and "gsm8k" in w for w in warnings)
    assert not plan_warnings(Campaign(compose()))  # the seed's concurrency 8 is below the hazard
    safe = compose(["benchmarks.gsm8k.gsm8k.parallel=16", "+model.server_args.disable_custom_all_reduce=true"])
    assert not plan_warnings(Campaign(safe))
    assert not plan_warnings(Campaign(compose(["benchmarks.gsm8k.gsm8k.parallel=16", "platform=h200", "model=glm52_fp8"])))


def test_a_theory_rule_for_a_benchmark_an_override_took_off_the_arm_is_unused_not_an_error():
    """Narrowing an arm's benchmarks on the command line (as tests and users do) leaves its rules for the others
    unused; a rule naming no benchmark of the experiment is still an error naming its key."""
    from specrepro.core.config import theory_entries

    cfg = compose([f"project_root={PROJECT_ROOT}", "experiment=eagle_topk_cpu", "experiment.arms.main_rs_off.benchmarks=[gsm8k]"])
    assert set(theory_entries(cfg)["main_rs_off"]) == {"gsm8k"}
    with pytest.raises(ConfigError, match=r"experiment.theory.main_rs_off.gsm9k: 'gsm9k' is not a benchmark"):
        compose([f"project_root={PROJECT_ROOT}", "experiment=eagle_topk_cpu", "+experiment.theory.main_rs_off.gsm9k={draft_temperature: 0}"])


def test_an_arm_plan_as_params_is_plain_and_the_same_in_every_process():
    """The measuring job's plan reaches it as a Snakemake param, which Snakemake compares by repr for its rerun
    trigger: plain values only (an object's repr carries its address), the same in every process, and the plan
    rebuilt from them equals the Snakefile's."""
    code = textwrap.dedent(f"""
        import json, pickle
        from specrepro.core.config import compose
        from specrepro.core.arm_plan import arm_plans, plan_as_params, plan_from_params
        plans = arm_plans(compose(["project_root={PROJECT_ROOT}", "experiment=eagle_topk_cpu", "results_dir=/tmp/r"]))
        params = {{name: plan_as_params(p) for name, p in plans.items()}}
        json.dumps(params)
        assert all(plan_from_params(pickle.loads(pickle.dumps(params[n]))) == p for n, p in plans.items())
        print(repr(params))
    """)
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PROJECT_ROOT)
            for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr[-3000:]
    assert runs[0].stdout == runs[1].stdout and "speed_bench" in runs[0].stdout
