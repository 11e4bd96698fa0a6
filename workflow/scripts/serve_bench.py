from pathlib import Path

from specrepro.serve import serve_bench_job
from specrepro.stage_log import stage_log

# Appended: a rerun's log keeps what the earlier launches said.
with stage_log(snakemake, mode="a") as log:
    launch = snakemake.wildcards.get("launch")
    serve_bench_job(
        snakemake.config,
        arm=snakemake.wildcards.arm,
        image_record=Path(snakemake.input.image),
        gpu_checks=[Path(v) for v in snakemake.input.gpu_check],
        output=Path(snakemake.output.done),
        log=log,
        # a launch job measures its launch; the arm job of a multi-launch campaign only records
        launch=int(launch) if launch else None,
        measure=bool(launch) or "launches" not in snakemake.input.keys(),
    )
