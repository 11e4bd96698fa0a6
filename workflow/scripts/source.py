from pathlib import Path

from specrepro.util.fileio import write_json
from specrepro.stages.sources import obtain_sglang
from specrepro.stages.stage_log import stage_log

with stage_log(snakemake) as log:
    manifest = obtain_sglang(
        snakemake.params.sglang,
        snakemake.wildcards.ref,
        Path(snakemake.output.tree),
        Path(snakemake.params.cache_dir),
        log,
    )
    print(manifest, file=log)
    write_json(Path(snakemake.output.manifest), manifest)
