rule collect:
    input:
        arms=expand(f"{R}/arms/{{arm}}/arm.json", arm=CAMPAIGN.arms),
    output:
        runs=f"{R}/tables/runs.csv",
        requests=f"{R}/tables/requests.parquet",
        acceptance=f"{R}/tables/acceptance.csv",
    log:
        f"{R}/logs/collect.log",
    conda:
        "../envs/specrepro.yaml"
    script:
        "../scripts/collect.py"
