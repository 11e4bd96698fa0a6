# The GPU checks the arms' patch series declare (patches/<series>/series.yaml), on one GPU inside the arm's own
# image before its server: an arm of a series as `patched`, an unpatched arm as every series' control.  A patched
# arm whose check fails is not measured.
rule gpu_check:
    input:
        image=L.image(),
        checks=lambda w: CAMPAIGN.gpu_check_files(w.arm),
    output:
        verdict=L.gpu_check(),
        markdown=L.gpu_check(suffix="md"),
    log:
        L.log("gpu_check", "{arm}"),
    benchmark:
        L.benchmark("gpu_check", "{arm}")
    conda:
        "../envs/specrepro.yaml"
    resources:
        gpu=1,
        measurement=1,
    params:
        launch=lambda w: CAMPAIGN.gpu_check_key(w.arm),
    script:
        "../scripts/gpu_check.py"
