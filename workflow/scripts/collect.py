from pathlib import Path

from specrepro.stages.collect import collect_campaign
from specrepro.stages.stage_log import stage_log

with stage_log(snakemake) as log:
    collect_campaign(
        snakemake.config,
        arm_records=[Path(p) for p in snakemake.input.arms],
        runs_csv=Path(snakemake.output.runs),
        requests_parquet=Path(snakemake.output.requests),
        acceptance_csv=Path(snakemake.output.acceptance),
        log=log,
    )
