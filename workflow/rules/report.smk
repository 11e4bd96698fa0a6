rule cpu_report:
    input:
        verdicts=VERDICTS,
    output:
        f"{R}/report/cpu_stages.md",
    log:
        f"{R}/logs/report/cpu_stages.log",
    conda:
        "../envs/specrepro.yaml"
    script:
        "../scripts/cpu_report.py"


rule report:
    input:
        runs=f"{R}/tables/runs.csv",
        requests=f"{R}/tables/requests.parquet",
        acceptance=f"{R}/tables/acceptance.csv",
        verdicts=VERDICTS,
        gpu_checks=targets(CAMPAIGN, "gpu_check", f"{R}/gpu_check/{{arm}}/verdict.json"),
        arms=expand(f"{R}/arms/{{arm}}/arm.json", arm=CAMPAIGN.arms),
    output:
        markdown=f"{R}/report/report.md",
        html=report(
            f"{R}/report/report.html",
            caption="../report/report_html.rst",
            category="Report",
        ),
        analysis=f"{R}/report/analysis.json",
        pr_comment=f"{R}/report/pr_comment.md",
        # every plot of the HTML report as a file, each with the caption the report gives it (written by this job)
        plots=report(
            directory(f"{R}/report/plots"),
            patterns=["{name}.png"],
            caption=f"{R}/report/plots.rst",
            category="Plots",
        ),
        captions=f"{R}/report/plots.rst",
    log:
        f"{R}/logs/report/report.log",
    conda:
        "../envs/specrepro.yaml"
    params:
        claims=CAMPAIGN.claims_path,
        # The claims' content, the published figures and the analysis
        # settings: editing any reruns the report, not the arms.
        analysis_key=CAMPAIGN.analysis_key(),
    script:
        "../scripts/report.py"
