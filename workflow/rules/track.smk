rule track_cpu_stages:
    input:
        verdicts=expand(
            f"{R}/patch_check/{{ref}}/{{series}}/verdict.json",
            zip,
            ref=[s[0] for s in SERIES],
            series=[s[1] for s in SERIES],
        ),
    output:
        f"{R}/tracking/cpu_stages.json",
    log:
        f"{R}/logs/track/cpu_stages.log",
    conda:
        "../envs/specrepro.yaml"
    resources:
        gpu=0,
    script:
        "../scripts/track.py"


rule track_campaign:
    input:
        verdicts=rules.track_cpu_stages.input.verdicts,
        runs=f"{R}/tables/runs.csv",
        report=f"{R}/report/report.md",
    output:
        f"{R}/tracking/campaign.json",
    log:
        f"{R}/logs/track/campaign.log",
    conda:
        "../envs/specrepro.yaml"
    resources:
        gpu=0,
    script:
        "../scripts/track.py"
