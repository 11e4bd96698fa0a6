rule cpu_report:
    input:
        verdicts=VERDICTS,
    output:
        L.report("cpu_stages.md"),
    log:
        L.log("report", "cpu_stages"),
    conda:
        "../envs/specrepro.yaml"
    script:
        "../scripts/cpu_report.py"


rule report:
    input:
        runs=L.table("runs.csv"),
        requests=L.table("requests.parquet"),
        acceptance=L.table("acceptance.csv"),
        verdicts=VERDICTS,
        gpu_checks=targets(CAMPAIGN, "gpu_check", L.gpu_check()),
        arms=[L.arm_record(arm) for arm in CAMPAIGN.arms],
        sequential=lambda w: ROUNDS.final_decision() if ROUNDS else [],
    output:
        markdown=L.report("report.md"),
        html=report(
            L.report("report.html"),
            caption="../report/report_html.rst",
            category="Report",
        ),
        analysis=L.report("analysis.json"),
        pr_comment=L.report("pr_comment.md"),
        # every plot of the HTML report as a file, each with the caption the report gives it (written by this job)
        plots=report(
            directory(L.report("plots")),
            patterns=["{name}.png"],
            caption=L.report("plots.rst"),
            category="Plots",
        ),
        captions=L.report("plots.rst"),
    log:
        L.log("report", "report"),
    conda:
        "../envs/specrepro.yaml"
    params:
        claims=CAMPAIGN.claims_path,
        # The claims' content, the published figures and the analysis
        # settings: editing any reruns the report, not the arms.
        analysis_key=CAMPAIGN.analysis_key(),
    script:
        "../scripts/report.py"
