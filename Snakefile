# specrepro: reproduce an LLM-serving change's claims as a DAG.
#   specrepro run [OVERRIDES...]            (composes the Hydra config once)
#   snakemake --profile profiles/local --config overrides='[model=llama31_8b_eagle3]'
from snakemake.utils import min_version

min_version("9.0")


from specrepro.workflow_support import (
    arm_input_tree,
    campaign_for_snakemake,
    series_targets,
)

CAMPAIGN = campaign_for_snakemake(config)
R = str(CAMPAIGN.results_dir)
SERIES = series_targets(CAMPAIGN)


include: "workflow/rules/source.smk"
include: "workflow/rules/patch.smk"
include: "workflow/rules/patch_check.smk"
include: "workflow/rules/image.smk"
include: "workflow/rules/serve_bench.smk"
include: "workflow/rules/collect.smk"
include: "workflow/rules/track.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        f"{R}/report/report.md",
        f"{R}/tracking/campaign.json",


rule cpu_stages:
    input:
        expand(
            f"{R}/patch_check/{{ref}}/{{series}}/verdict.json",
            zip,
            ref=[s[0] for s in SERIES],
            series=[s[1] for s in SERIES],
        ),
        f"{R}/report/cpu_stages.md",
        f"{R}/tracking/cpu_stages.json",
