import json
from pathlib import Path

from specrepro.stages.serve import serve_bench_job
from specrepro.stages.stage_log import stage_log

# Appended: a rerun's log keeps what the earlier launches said.
with stage_log(snakemake, mode="a") as log:
    launch = snakemake.wildcards.get("launch")
    records = snakemake.input.get("launches")
    serve_bench_job(
        snakemake.config,
        arm=snakemake.wildcards.arm,
        image_record=Path(snakemake.input.image),
        gpu_checks=[Path(v) for v in snakemake.input.gpu_check],
        output=Path(snakemake.output.done),
        log=log,
        # a launch job measures its launch; the arm job of a multi-launch campaign only records
        launch=int(launch) if launch else None,
        measure=bool(launch) or records is None,
        # the launches the arm ran (a sequential design's rounds decide how many)
        launch_numbers=(
            [json.loads(Path(p).read_text())["launch"] for p in records]
            if records is not None and not launch
            else None
        ),
        scheduled_remeasure=snakemake.params.get("remeasure"),
    )
