from pathlib import Path

from specrepro.core.arm_plan import build_arm_plan
from specrepro.stages.image import image_stage
from specrepro.core.series import load_series, series_folder
from specrepro.stages.stage_log import stage_log

with stage_log(snakemake) as log:
    plan = build_arm_plan(snakemake.config, snakemake.wildcards.arm)
    image_stage(
        plan,
        load_series(series_folder(snakemake.config, plan.series)) if plan.series else None,
        tree_manifest=Path(snakemake.input.tree_manifest),
        verdicts=[Path(v) for v in snakemake.input.verdicts],
        output=Path(snakemake.output[0]),
        log=log,
        base_record=Path(snakemake.input.base),
    )
