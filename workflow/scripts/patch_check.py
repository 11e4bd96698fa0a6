import json
from pathlib import Path

from specrepro.cpu_check import patch_check, render_markdown
from specrepro.sources import write_json

with open(snakemake.log[0], "w") as log:
    sglang = snakemake.params.sglang
    verdict = patch_check(
        version=sglang["version"],
        reference_version=sglang.get("reference_version"),
        source_tree=Path(snakemake.input.source_tree),
        source_manifest=json.loads(Path(snakemake.input.source_manifest).read_text()),
        patched_tree=Path(snakemake.input.patched_tree),
        patch_manifest=json.loads(Path(snakemake.input.patch_manifest).read_text()),
        project_root=Path(snakemake.params.project_root),
        cache_dir=Path(snakemake.params.cache_dir),
        work_dir=Path(snakemake.output.verdict).parent / "probes",
        log=log,
    )
    text = render_markdown(verdict)
    print(text, file=log)
    # Written whatever the verdict: a failed check is a result the report
    # shows; the image stage of a patched arm refuses a failed verdict.
    write_json(Path(snakemake.output.verdict), verdict)
    Path(snakemake.output.markdown).write_text(text)
