from pathlib import Path

from specrepro.core.campaign import Campaign
from specrepro.stages.gpu_check import gpu_check_stage
from specrepro.stages.stage_log import stage_log

with stage_log(snakemake) as log:
    campaign = Campaign(snakemake.config)
    arm = snakemake.wildcards.arm
    gpu_check_stage(
        campaign.plan(arm),
        campaign.gpu_checked_series(arm),
        image_record=Path(snakemake.input.image),
        verdict_json=Path(snakemake.output.verdict),
        verdict_md=Path(snakemake.output.markdown),
        log=log,
    )
