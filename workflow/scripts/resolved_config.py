from pathlib import Path

from specrepro.core.config import dump_resolved
from specrepro.util.fileio import write_text_atomic
from specrepro.stages.stage_log import stage_log

with stage_log(snakemake) as log:
    write_text_atomic(Path(snakemake.output[0]), dump_resolved(snakemake.config))
    print(f"resolved config {snakemake.params.config_hash} -> {snakemake.output[0]}", file=log)
