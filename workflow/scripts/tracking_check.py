from pathlib import Path

from specrepro.util.fileio import write_json
from specrepro.stages.stage_log import stage_log
from specrepro.stages.tracking_server import check_campaign_server

with stage_log(snakemake) as log:
    write_json(Path(snakemake.output[0]), check_campaign_server(snakemake.config, out=log))
