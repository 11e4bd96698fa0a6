import json
from pathlib import Path

from specrepro.tracking import CampaignTracker
from specrepro.sources import write_json

with open(snakemake.log[0], "w") as log:
    tracker = CampaignTracker(snakemake.config)
    runs = {"tracking_uri": tracker.uri, "parent_run": tracker.parent, "children": {}}
    for verdict in snakemake.input.verdicts:
        runs["children"][verdict] = tracker.log_patch_check(Path(verdict))
    if "runs" in snakemake.input.keys():
        runs["children"].update(tracker.log_results(Path(snakemake.config["results_dir"])))
    print(json.dumps(runs, indent=1), file=log)
    write_json(Path(snakemake.output[0]), runs)
