rule serve_bench:
    input:
        image=f"{R}/image/{{arm}}.json",
    output:
        done=f"{R}/arms/{{arm}}/arm.json",
    log:
        f"{R}/logs/serve_bench/{{arm}}.log",
    conda:
        "../envs/specrepro.yaml"
    resources:
        gpu=CAMPAIGN.cfg["model"]["gpus"],
        measurement=1,
    params:
        runs=lambda w: [r.stem for r in CAMPAIGN.bench_runs(w.arm)],
        server_args=lambda w: CAMPAIGN.server_args(w.arm),
    script:
        "../scripts/serve_bench.py"
