from pathlib import Path

from specrepro.util.datasets import resolve_dataset
from specrepro.stages.stage_log import stage_log

with stage_log(snakemake) as log:
    source, key = snakemake.params.source
    resolve_dataset(dict(source), record=Path(snakemake.output[0]), offline=snakemake.params.offline, log=log,
                    key=key)
