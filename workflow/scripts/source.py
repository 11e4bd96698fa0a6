from pathlib import Path

from specrepro.sources import obtain_sglang, write_json

with open(snakemake.log[0], "w") as log:
    manifest = obtain_sglang(
        snakemake.params.sglang,
        snakemake.wildcards.ref,
        Path(snakemake.output.tree),
        Path(snakemake.params.cache_dir),
        log,
    )
    print(manifest, file=log)
    write_json(Path(snakemake.output.manifest), manifest)
