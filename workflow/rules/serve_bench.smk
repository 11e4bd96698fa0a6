# The resolved config next to the results (`specrepro run` writes it first;
# plain Snakemake gets it here): clients and `specrepro log` read it.
rule resolved_config:
    output:
        L.resolved_config(),
    log:
        L.log("resolved_config"),
    conda:
        "../envs/specrepro.yaml"
    params:
        config_hash=CAMPAIGN.config_hash,
    script:
        "../scripts/resolved_config.py"


# The measuring job: one server launch of an arm measures its runs.  One body: a campaign of one launch per arm uses
# it as `serve_bench` (the arm's record itself), else one job per (arm, launch), each waiting for the launch before it
# in the interleaved order (A B C C B A ...), whose records `serve_bench` then gathers on the submit host.
rule serve_launch:
    input:
        image=L.image(),
        model=CAMPAIGN.model_inputs(),
        gpu_check=lambda w: CAMPAIGN.gpu_check_for_arm(w.arm),
        datasets=lambda w: CAMPAIGN.datasets_for_arm(w.arm),
        # Its content is keyed per run below; a rewrite alone must not re-measure.
        config=ancient(L.resolved_config()),
        previous=lambda w: (
            (ROUNDS or CAMPAIGN).previous_launch(w.arm, w.launch)
            if launch_number(w)
            else []
        ),
    output:
        done=L.launch_record(),
    log:
        L.log("serve_bench", "{arm}.launch{launch}"),
    benchmark:
        L.benchmark("serve_bench", "{arm}.launch{launch}")
    conda:
        "../envs/specrepro.yaml"
    # A measuring job holds the model's GPUs; exclusive placement also takes
    # the whole node (Slurm) and the one `measurement` slot (one host).
    resources:
        gpu=CAMPAIGN.cfg["model"]["gpus"],
        measurement=1 if CAMPAIGN.cfg["serve"]["placement"] == "exclusive" else 0,
        slurm_extra=(
            "--exclusive" if CAMPAIGN.cfg["serve"]["placement"] == "exclusive" else ""
        ),
    params:
        # Everything that determines what this arm measures: a change reruns it.
        key=lambda w: thawed(PLANS[w.arm].measurement_key),
        # The arm's plan, built once by the Snakefile: the job measures with it.
        plan=lambda w: plan_as_params(PLANS[w.arm]),
        # A removed run record (one sweep cell, one repeat) reruns this job, which measures only it.
        remeasure=lambda w: CAMPAIGN.runs_to_remeasure(w.arm, launch_number(w)),
        platform=CAMPAIGN.cfg["platform"]["name"],
        # The server command exactly as `specrepro plan` prints it ($ symbols set at launch).
        launch=lambda w: planned_server_command(PLANS[w.arm]),
    message:
        "arm {wildcards.arm} launch {wildcards.launch} on platform {params.platform} (gpu={resources.gpu}, slurm_extra={resources.slurm_extra}): {params.launch}"
    script:
        "../scripts/serve_bench.py"


if CAMPAIGN.launches == 1:

    use rule serve_launch as serve_bench with:
        output:
            done=L.arm_record(),
        log:
            L.log("serve_bench", "{arm}"),
        benchmark:
            L.benchmark("serve_bench", "{arm}")
        message:
            "arm {wildcards.arm} on platform {params.platform} (gpu={resources.gpu}, slurm_extra={resources.slurm_extra}): {params.launch}"

else:

    if ROUNDS:

        # After each round: which claims are decided and which arms launch
        # again (specrepro.analysis.sequential_round), from every launch so far.
        checkpoint sequential_round:
            input:
                launches=lambda w: ROUNDS.launch_records(int(w.round)),
                config=ancient(L.resolved_config()),
            output:
                L.round_decision(),
            log:
                L.log("sequential", "round{round}"),
            localrule: True
            conda:
                "../envs/specrepro.yaml"
            params:
                claims=CAMPAIGN.claims_path,
                analysis_key=CAMPAIGN.analysis_key(),
            message:
                "sequential design, round {wildcards.round}: which claims are decided, which arms launch again"
            script:
                "../scripts/sequential_round.py"

    rule serve_bench:
        input:
            image=L.image(),
            gpu_check=lambda w: CAMPAIGN.gpu_check_for_arm(w.arm),
            launches=lambda w: (
                ROUNDS.arm_launches(w.arm)
                if ROUNDS
                else [
                    L.launch_record(w.arm, n) for n in range(1, CAMPAIGN.launches + 1)
                ]
            ),
        output:
            done=L.arm_record(),
        log:
            L.log("serve_bench", "{arm}"),
        localrule: True
        conda:
            "../envs/specrepro.yaml"
        params:
            key=lambda w: thawed(PLANS[w.arm].measurement_key),
            plan=lambda w: plan_as_params(PLANS[w.arm]),
        script:
            "../scripts/serve_bench.py"
