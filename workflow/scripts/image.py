from pathlib import Path

from specrepro.image import image_stage
from specrepro.stage_log import stage_log

with stage_log(snakemake) as log:
    image_stage(
        snakemake.config,
        arm=snakemake.wildcards.arm,
        tree_manifest=Path(snakemake.input.tree_manifest),
        verdicts=[Path(v) for v in snakemake.input.verdicts],
        output=Path(snakemake.output[0]),
        log=log,
        base_record=Path(snakemake.input.base),
    )
