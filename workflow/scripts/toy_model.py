from specrepro.stages.stage_log import stage_log
from specrepro.stages.toy_model import toy_model_stage

with stage_log(snakemake) as log:
    toy_model_stage(
        snakemake.params.toy,
        num_steps=snakemake.params.num_steps,
        corpus=snakemake.params.corpus,
        log=log,
    )
