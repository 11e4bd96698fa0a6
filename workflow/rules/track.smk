rule track_cpu_stages:
    input:
        verdicts=VERDICTS,
    output:
        f"{R}/tracking/cpu_stages.json",
    log:
        f"{R}/logs/track/cpu_stages.log",
    conda:
        "../envs/specrepro.yaml"
    params:
        tracking=CAMPAIGN.cfg["tracking"],
    script:
        "../scripts/track.py"


rule track_campaign:
    input:
        verdicts=VERDICTS,
        gpu_checks=targets(CAMPAIGN, "gpu_check", f"{R}/gpu_check/{{arm}}/verdict.json"),
        runs=f"{R}/tables/runs.csv",
        report=f"{R}/report/report.md",
        # logged with the report: the HTML page and the PR comment
        pages=[f"{R}/report/report.html", f"{R}/report/pr_comment.md"],
    output:
        f"{R}/tracking/campaign.json",
    log:
        f"{R}/logs/track/campaign.log",
    conda:
        "../envs/specrepro.yaml"
    params:
        tracking=CAMPAIGN.cfg["tracking"],
    script:
        "../scripts/track.py"
