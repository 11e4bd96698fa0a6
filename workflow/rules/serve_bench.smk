rule serve_bench:
    input:
        image=f"{R}/image/{{arm}}.json",
    output:
        done=f"{R}/arms/{{arm}}/arm.json",
    log:
        f"{R}/logs/serve_bench/{{arm}}.log",
    conda:
        "../envs/specrepro.yaml"
    # A measuring job holds the model's GPUs; exclusive placement also takes
    # the whole node (Slurm) and one `measurement` slot (local profile).
    resources:
        gpu=CAMPAIGN.cfg["model"]["gpus"],
        measurement=1 if CAMPAIGN.exclusive else 0,
        slurm_extra="--exclusive" if CAMPAIGN.exclusive else "",
    params:
        runs=lambda w: [r.stem for r in CAMPAIGN.bench_runs(w.arm)],
        server_args=lambda w: CAMPAIGN.server_args(w.arm),
    script:
        "../scripts/serve_bench.py"
