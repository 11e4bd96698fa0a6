rule image:
    input:
        tree_manifest=lambda w: arm_input_tree(CAMPAIGN, w.arm),
        verdicts=lambda w: CAMPAIGN.verdicts_for_arm(w.arm),
    output:
        f"{R}/image/{{arm}}.json",
    params:
        platform=CAMPAIGN.cfg["platform"],
        series=lambda w: CAMPAIGN.series_of(w.arm),
    log:
        f"{R}/logs/image/{{arm}}.log",
    # Image builds never hold GPUs.
    resources:
        gpu=0,
    script:
        "../scripts/image.py"
