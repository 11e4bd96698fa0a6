rule collect:
    input:
        arms=[L.arm_record(arm) for arm in CAMPAIGN.arms],
    output:
        runs=L.table("runs.csv"),
        requests=L.table("requests.parquet"),
        acceptance=L.table("acceptance.csv"),
    log:
        L.log("collect"),
    conda:
        "../envs/specrepro.yaml"
    script:
        "../scripts/collect.py"
