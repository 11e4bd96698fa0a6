from pathlib import Path

from specrepro.fileio import write_json
from specrepro.stage_log import stage_log
from specrepro.tracking_server import check_campaign_server

with stage_log(snakemake) as log:
    write_json(Path(snakemake.output[0]), check_campaign_server(snakemake.config, out=log))
