from pathlib import Path

from specrepro.analysis.report import cpu_stages_report
from specrepro.util.fileio import write_text_atomic
from specrepro.stages.stage_log import stage_log

with stage_log(snakemake) as log:
    text = cpu_stages_report(snakemake.config, [Path(v) for v in snakemake.input.verdicts])
    write_text_atomic(Path(snakemake.output[0]), text)
    print(text, file=log)
