from pathlib import Path

from specrepro.stages.stage_log import stage_log
from specrepro.stages.tracking import log_campaign

with stage_log(snakemake) as log:
    log_campaign(
        snakemake.config,
        verdicts=[Path(v) for v in snakemake.input.verdicts],
        gpu_checks=[Path(v) for v in snakemake.input.get("gpu_checks", [])],
        with_results="runs" in snakemake.input.keys(),
        record=Path(snakemake.output[0]),
        log=log,
    )
