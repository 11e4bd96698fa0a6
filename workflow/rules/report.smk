rule cpu_report:
    input:
        verdicts=rules.track_cpu_stages.input.verdicts,
    output:
        f"{R}/report/cpu_stages.md",
    log:
        f"{R}/logs/report/cpu_stages.log",
    conda:
        "../envs/specrepro.yaml"
    resources:
        gpu=0,
    script:
        "../scripts/cpu_report.py"


rule report:
    input:
        runs=f"{R}/tables/runs.csv",
        requests=f"{R}/tables/requests.parquet",
        verdicts=rules.track_cpu_stages.input.verdicts,
    output:
        markdown=f"{R}/report/report.md",
        html=report(f"{R}/report/report.html", category="Report"),
        analysis=f"{R}/report/analysis.json",
    log:
        f"{R}/logs/report/report.log",
    conda:
        "../envs/specrepro.yaml"
    resources:
        gpu=0,
    params:
        claims=CAMPAIGN.claims_path,
    script:
        "../scripts/report.py"
