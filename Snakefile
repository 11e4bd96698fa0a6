# specrepro: reproduce an LLM-serving change's claims as a DAG.
#   specrepro run [OVERRIDES...]            (composes the Hydra config once)
#   snakemake --profile rocm --config overrides='[model.server_args.model_path=/models/GLM-5.2-MXFP4]'
from snakemake.utils import min_version

min_version("9.0")


from specrepro.core.arm_plan import thawed
from specrepro.stages.tracking_server import remote_uri
from specrepro.serving.plan_text import planned_server_command
from specrepro.workflow_support import (
    Rounds,
    arm_constraint,
    campaign_for_snakemake,
    targets,
)

# composed (or read back) and checked once; every arm's plan built once
CAMPAIGN = campaign_for_snakemake(config)
PLANS = CAMPAIGN.plans
# every path of the campaign's results folder, and its Snakemake pattern (specrepro.core.layout)
L = CAMPAIGN.layout
VERDICTS = targets(CAMPAIGN, "patch_check", L.patch_check())
# a sequential design's rounds, each decided by a checkpoint after the round before
ROUNDS = Rounds(CAMPAIGN, checkpoints) if CAMPAIGN.policy else None
# A team's tracking server is checked by the DAG's first job, before any source, image or server job (its record is
# ancient: written once, it never re-runs what follows); `specrepro run` checks it again each time, in-process.
TRACKING_CHECK = (
    [ancient(L.tracking("server_check"))] if remote_uri(CAMPAIGN.cfg) else []
)


wildcard_constraints:
    ref=r"[A-Za-z0-9][A-Za-z0-9_.+-]*",
    series=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    arm=arm_constraint(CAMPAIGN),
    launch=r"[1-9][0-9]*",
    round=r"[1-9][0-9]*",
    benchmark=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    dataset=r"[A-Za-z0-9][A-Za-z0-9_.-]*",


# Light and network-bound jobs run where Snakemake runs (the submit host
# reaches GitHub, the package registry and the MLflow server; compute nodes
# often do not).  Only the image build, the checks and measuring jobs are
# cluster jobs.
localrules:
    all,
    cpu_stages,
    source,
    patch,
    collect,
    report,
    cpu_report,
    track_cpu_stages,
    track_campaign,
    tracking_check,
    resolved_config,
    datasets,


include: "workflow/rules/source.smk"
include: "workflow/rules/patch.smk"
include: "workflow/rules/patch_check.smk"
include: "workflow/rules/image.smk"
include: "workflow/rules/toy_model.smk"
include: "workflow/rules/datasets.smk"
include: "workflow/rules/gpu_check.smk"
include: "workflow/rules/serve_bench.smk"
include: "workflow/rules/collect.smk"
include: "workflow/rules/track.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        L.report("report.md"),
        L.report("report.html"),
        L.report("pr_comment.md"),
        L.tracking("campaign"),


rule cpu_stages:
    input:
        VERDICTS,
        L.report("cpu_stages.md"),
        L.tracking("cpu_stages"),
