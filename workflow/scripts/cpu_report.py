from pathlib import Path

from specrepro.report import cpu_stages_report

with open(snakemake.log[0], "w") as log:
    text = cpu_stages_report(snakemake.config, [Path(v) for v in snakemake.input.verdicts])
    Path(snakemake.output[0]).write_text(text)
    print(text, file=log)
