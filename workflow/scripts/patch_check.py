from pathlib import Path

from specrepro.stages.patch_check import patch_check_stage
from specrepro.stages.stage_log import stage_log

with stage_log(snakemake) as log:
    patch_check_stage(
        series=snakemake.wildcards.series,
        sglang=snakemake.params.sglang,
        source_manifest=Path(snakemake.input.source_manifest),
        source_tree=Path(snakemake.input.source_tree),
        patch_manifest=Path(snakemake.input.patch_manifest),
        patched_tree=Path(snakemake.input.patched_tree),
        series_dir=Path(snakemake.params.series_dir),
        requirements=Path(snakemake.input.requirements),
        cache_dir=Path(snakemake.params.cache_dir),
        verdict_json=Path(snakemake.output.verdict),
        verdict_md=Path(snakemake.output.markdown),
        log=log,
    )
