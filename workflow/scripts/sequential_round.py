from pathlib import Path

from specrepro.analysis.sequential_round import decide_round
from specrepro.stages.stage_log import stage_log

with stage_log(snakemake) as log:
    decide_round(
        snakemake.config,
        round_no=int(snakemake.wildcards.round),
        launch_records=[Path(p) for p in snakemake.input.launches],
        claims_path=snakemake.params.claims or None,
        output=Path(snakemake.output[0]),
        log=log,
    )
