from pathlib import Path

from specrepro.collect import collect_campaign

with open(snakemake.log[0], "w") as log:
    collect_campaign(
        snakemake.config,
        arm_records=[Path(p) for p in snakemake.input.arms],
        runs_csv=Path(snakemake.output.runs),
        requests_parquet=Path(snakemake.output.requests),
        log=log,
    )
