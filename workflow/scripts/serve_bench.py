from pathlib import Path

from specrepro.serve import serve_arm

serve_arm(
    snakemake.config,
    arm=snakemake.wildcards.arm,
    image_record=Path(snakemake.input.image),
    output=Path(snakemake.output.done),
    log_path=Path(snakemake.log[0]),
)
