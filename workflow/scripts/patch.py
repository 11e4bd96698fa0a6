from pathlib import Path

from specrepro.stages.sources import patch_stage
from specrepro.stages.stage_log import stage_log

with stage_log(snakemake) as log:
    patch_stage(
        source_manifest=Path(snakemake.input.manifest),
        source_tree=Path(snakemake.input.tree),
        series_dir=Path(snakemake.params.series_dir),
        series=snakemake.wildcards.series,
        cache_dir=Path(snakemake.params.cache_dir),
        tree=Path(snakemake.output.tree),
        manifest=Path(snakemake.output.manifest),
        log=log,
    )
