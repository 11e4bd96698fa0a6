import json
import shutil
from pathlib import Path

from specrepro.patching import apply_series
from specrepro.sources import resolve_patch_series, write_json

with open(snakemake.log[0], "w") as log:
    source = json.loads(Path(snakemake.input.manifest).read_text())
    patches = resolve_patch_series(
        snakemake.params.entries,
        Path(snakemake.params.project_root),
        Path(snakemake.params.cache_dir),
        log,
    )
    tree = Path(snakemake.output.tree)
    # Patch a copy: the pristine source stays for the unpatched arms and checks.
    shutil.copytree(snakemake.input.tree, tree, symlinks=True)
    record = apply_series(tree, patches, source["layout"])
    record.update(source=source, series=snakemake.wildcards.series)
    print(json.dumps(record, indent=1), file=log)
    write_json(Path(snakemake.output.manifest), record)
