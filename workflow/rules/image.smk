rule image:
    input:
        tree_manifest=lambda w: arm_input_tree(CAMPAIGN, w.arm),
        verdicts=lambda w: CAMPAIGN.verdicts_for_arm(w.arm),
    output:
        f"{R}/image/{{arm}}.json",
    log:
        f"{R}/logs/image/{{arm}}.log",
    conda:
        "../envs/specrepro.yaml"
    # Image builds never hold GPUs.
    resources:
        gpu=0,
    params:
        platform=CAMPAIGN.cfg["platform"],
        series=lambda w: CAMPAIGN.series_of(w.arm),
    script:
        "../scripts/image.py"
