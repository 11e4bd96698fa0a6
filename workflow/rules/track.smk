# The team's tracking server (tracking.uri=http...): reachable, credentials accepted, runs may be created -- before
# any source, image or server job (they take its record as input).
rule tracking_check:
    output:
        L.tracking("server_check"),
    log:
        L.log("track", "server_check"),
    conda:
        "../envs/specrepro.yaml"
    script:
        "../scripts/tracking_check.py"


rule track_cpu_stages:
    input:
        verdicts=VERDICTS,
    output:
        L.tracking("cpu_stages"),
    log:
        L.log("track", "cpu_stages"),
    conda:
        "../envs/specrepro.yaml"
    params:
        tracking=CAMPAIGN.cfg["tracking"],
    script:
        "../scripts/track.py"


rule track_campaign:
    input:
        verdicts=VERDICTS,
        gpu_checks=targets(CAMPAIGN, "gpu_check", L.gpu_check()),
        runs=L.table("runs.csv"),
        report=L.report("report.md"),
        # logged with the report: the HTML page and the PR comment
        pages=[L.report("report.html"), L.report("pr_comment.md")],
    output:
        L.tracking("campaign"),
    log:
        L.log("track", "campaign"),
    conda:
        "../envs/specrepro.yaml"
    params:
        tracking=CAMPAIGN.cfg["tracking"],
    script:
        "../scripts/track.py"
