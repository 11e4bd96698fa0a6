"""What `specrepro plan` prints of a campaign before it runs: every command exactly as it will run, the sweep's
treatments, the launches and their cost, and the known hazards of the setup.

Values known only at launch are symbols: $PORT (a free port), $GPU<i> (the GPUs the job is granted), $IMAGE (the image
the image stage resolved), $USER (the caller's uid:gid), $LAUNCH (the launch id).  The claims' decidability is the
analysis's (specrepro.analysis.plan); the entry point prints both.
"""

from __future__ import annotations

import shlex
from typing import List

from specrepro.core.arm_plan import ArmPlan
from specrepro.core.campaign import Campaign
from specrepro.core.cost import campaign_cost, repeats_of, run_cost
from specrepro.serving.launch import Launcher, planned_context
from specrepro.core.sweep import factors_of, level_text, treatment_table


def planned_server_command(plan: ArmPlan) -> str:
    """The arm's server command as `plan` prints it (a Snakemake param: a changed command reruns the arm)."""
    return shlex.join(Launcher(plan).server_argv(planned_context(plan)))


def describe_arm(campaign: Campaign, plan: ArmPlan) -> List[str]:
    launcher, ctx = Launcher(plan), planned_context(plan)
    lines = ["", f"## arm {plan.name}: {plan.description}",
             f"#  sglang ref {plan.ref}, patch series {plan.series or 'none'}"]
    if campaign.gpu_check_runs(plan.name):
        named = ", ".join(f"{e['series']}: {', '.join(c['name'] for c in e['spec']['checks'] if c['where'] == 'gpu')}"
                          for e in campaign.gpu_checked_series(plan.name))
        lines.append(f"#  gpu_check first (one GPU, in this arm's image; {named}; "
                     f"{'a failure stops this arm' if plan.series else 'as the control of each series'})")
    lines.append("server: " + shlex.join(launcher.server_argv(ctx)))
    for run in plan.runs:
        out = str(plan.arm_dir / run.stem)
        lines.append(f"bench {run.benchmark} r{run.repeat}: " + shlex.join(launcher.client_argv(ctx, run, out)))
    return lines


def describe_commands(campaign: Campaign) -> List[str]:
    """Per arm: the server command and every benchmark command, exactly as they run."""
    cfg = campaign.cfg
    lines = [
        f"# campaign {campaign.name}: sglang {cfg['sglang']['version']} ({cfg['sglang']['git_ref']}), "
        f"model {cfg['model']['name']}, platform {cfg['platform']['name']} ({cfg['platform']['container_runtime']})",
        f"# results: {campaign.results_dir}",
        "# $PORT: a free port; $GPU<i>: the GPUs the job is granted; $IMAGE: the image the image stage resolved; "
        "$USER: the caller's uid:gid; $LAUNCH: the launch id",
    ]
    for plan in campaign.plans.values():
        lines += describe_arm(campaign, plan)
    return lines


def describe_launches(campaign: Campaign) -> List[str]:
    """How many server launches the campaign costs, in which order they run, and what it costs in all."""
    cfg = campaign.cfg
    n = len(campaign.arms) * campaign.launches
    load = float(cfg["serve"].get("expected_load_s") or 0)
    cost = campaign_cost(cfg)
    budget = campaign.experiment.get("max_gpu_hours")
    lines = [f"## launches: {campaign.launches} per arm, {n} in all; loading costs about {n} x {load:.0f} s = "
             f"{n * load / 60:.0f} min (serve.expected_load_s) before any measurement",
             f"## cost: {cost['requests']} requests; about {cost['seconds'] / 3600:.2f} h of server time x "
             f"{cost['gpus']} GPUs = {cost['gpu_hours']:.2f} GPU-hours (serve.expected_load_s, "
             f"serve.expected_tpot_ms at concurrency 1, +{cfg['serve']['expected_tpot_growth']:.0%} a "
             f"step per extra request); budget "
             + (f"{budget:g} GPU-hours (experiment.max_gpu_hours)" if budget is not None else
                "none (experiment.max_gpu_hours)")]
    policy = campaign.policy
    if policy:
        first = campaign_cost(cfg, launches=policy.min)
        lines[0] = (f"## launches: a sequential design {policy.text()}: round 1 launches every arm {policy.min} "
                    f"times ({len(campaign.arms) * policy.min} launches); after each round the claims are judged "
                    f"and only the arms an undecided claim names launch again, up to {policy.schedule} per arm "
                    f"({n} launches at most); loading costs about {load:.0f} s a launch (serve.expected_load_s)")
        lines[1] = lines[1].replace("## cost: ", f"## cost: round 1 {first['gpu_hours']:.2f} GPU-hours; at most ")
        if budget is not None:
            lines[1] += "; the rounds stop before one would cross it"
    if campaign.launches > 1:
        lines.append(("round 1 order (interleaved; later rounds interleave the arms they launch): " if policy else
                      "order (interleaved; verdicts use the between-launch noise): ")
                     + " ".join(f"{a}#{k}" for a, k in campaign.launch_order()))
    return lines


def describe_treatments(campaign: Campaign) -> List[str]:
    """The sweep's treatment table: per arm cell and benchmark cell, its levels, launch, requests and time."""

    cfg = campaign.cfg
    factors = factors_of(cfg)
    if not factors:
        return []
    kinds = {f: ("server: " + v["server"]) if v.get("server") else
             "client: " + ", ".join(f"{k}.{s}" for k, s in v["client"].items()) for f, v in factors.items()}
    lines = ["## treatments: " + "; ".join(f"{f} {[*v['levels']]} ({kinds[f]})" for f, v in factors.items()),
             "# client factors run on the arm's one warm server; each server level is a launch of its own",
             f"{'arm':<34} {'benchmark':<30} " + " ".join(f"{f:>12}" for f in factors)
             + f" {'launch':>7} {'requests':>9} {'minutes':>8}"]
    launches = {a: i for i, a in enumerate(campaign.arms, 1)}
    for row in treatment_table(cfg):
        one = run_cost(cfg["benchmarks"][row["benchmark"]], cfg["serve"])
        reps = repeats_of(cfg, row["benchmark"]) * campaign.launches
        levels = " ".join(f"{level_text(row['levels'][f]) if f in row['levels'] else '-':>12}" for f in factors)
        lines.append(f"{row['arm']:<34} {row['benchmark']:<30} {levels} {launches[row['arm']]:>7} "
                     f"{one['requests'] * reps:>9} {one['seconds'] * reps / 60:>8.1f}")
    lines.append("")
    return lines


def describe_plan(campaign: Campaign) -> str:
    """Everything plan prints before the claims' decidability: commands, treatments, launches and cost."""
    return "\n".join([*describe_commands(campaign), "", *describe_treatments(campaign), *describe_launches(campaign)])


def warnings(campaign: Campaign) -> List[str]:
    """Known hazards of this campaign's setup, as data; `plan` prints them."""
    out = []
    cfg = campaign.cfg
    args = cfg["model"]["server_args"]
    if cfg["platform"]["accelerator"] == "rocm" and str(args.get("speculative_algorithm", "")).startswith("EAGLE"):
        for plan in campaign.plans.values():
            if plan.server_args.get("disable_custom_all_reduce"):
                continue
            for b, bench in plan.benchmarks.items():
                conc = plan.kind(b).cost_figures(plan.settings(b)).concurrency
                if conc >= 16:
                    out.append(f"arm {plan.name}, benchmark {b}: EAGLE on ROCm at client concurrency {conc} can "
                               f"deadlock in aiter's custom all-reduce (sglang issue 29313); add "
                               f"--disable-custom-all-reduce (model.server_args.disable_custom_all_reduce=true)")
    return out
