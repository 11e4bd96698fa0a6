# The patch executed on one GPU inside the arm's own image, before its server:
# the draft proposal on device tensors, CUDA/HIP graph capture and replay, and
# sglang's graph runner's top_ks buffer.  A patched arm whose check fails is
# not measured.
rule gpu_check:
    input:
        image=f"{R}/image/{{arm}}.json",
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
