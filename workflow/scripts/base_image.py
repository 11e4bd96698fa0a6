from pathlib import Path

from specrepro.stages.image import resolve_base
from specrepro.stages.stage_log import stage_log

with stage_log(snakemake) as log:
    resolve_base(snakemake.params.platform, snakemake.params.base, Path(snakemake.params.cache_dir),
                 Path(snakemake.output[0]), log)
