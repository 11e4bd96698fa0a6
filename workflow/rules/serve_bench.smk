rule serve_bench:
    input:
        image=f"{R}/image/{{arm}}.json",
    output:
        done=f"{R}/arms/{{arm}}/arm.json",
    params:
        runs=lambda w: [r.stem for r in CAMPAIGN.bench_runs(w.arm)],
        server_args=lambda w: CAMPAIGN.server_args(w.arm),
    log:
        f"{R}/logs/serve_bench/{{arm}}.log",
    resources:
        gpu=CAMPAIGN.cfg["model"]["gpus"],
        measurement=1,
    script:
        "../scripts/serve_bench.py"
