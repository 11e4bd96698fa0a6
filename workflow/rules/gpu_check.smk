# The GPU checks the arms' patch series declare (patches/<series>/series.yaml), on one GPU inside the arm's own
# image before its server: an arm of a series as `patched`, an unpatched arm as every series' control.  A patched
# arm whose check fails is not measured.
rule gpu_check:
    input:
        image=f"{R}/image/{{arm}}.json",
        checks=lambda w: CAMPAIGN.gpu_check_files(w.arm),
    output:
        verdict=f"{R}/gpu_check/{{arm}}/verdict.json",
        markdown=f"{R}/gpu_check/{{arm}}/verdict.md",
    log:
        f"{R}/logs/gpu_check/{{arm}}.log",
    benchmark:
        f"{R}/benchmarks/gpu_check/{{arm}}.tsv"
    conda:
        "../envs/specrepro.yaml"
    resources:
        gpu=1,
        measurement=1,
    params:
        launch=lambda w: CAMPAIGN.gpu_check_key(w.arm),
    script:
        "../scripts/gpu_check.py"
