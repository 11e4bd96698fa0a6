from pathlib import Path

from specrepro.analysis.report import campaign_report
from specrepro.stages.stage_log import stage_log

with stage_log(snakemake) as log:
    campaign_report(
        snakemake.config,
        runs_csv=Path(snakemake.input.runs),
        requests_parquet=Path(snakemake.input.requests),
        verdicts=[Path(v) for v in snakemake.input.verdicts + snakemake.input.gpu_checks],
        claims_path=Path(snakemake.params.claims) if snakemake.params.claims else None,
        markdown=Path(snakemake.output.markdown),
        html=Path(snakemake.output.html),
        analysis_json=Path(snakemake.output.analysis),
        log=log,
        arm_records=[Path(p) for p in snakemake.input.arms],
        acceptance_csv=Path(snakemake.input.acceptance),
        pr_comment_md=Path(snakemake.output.pr_comment),
        plots_dir=Path(snakemake.output.plots),
        captions=Path(snakemake.output.captions),
        sequential_decision=(
            Path(snakemake.input.sequential[0]) if snakemake.input.sequential else None
        ),
    )
