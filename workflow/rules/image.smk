# The base image resolved once per campaign: every arm runs that digest.
rule base_image:
    output:
        f"{R}/image/base.json",
    log:
        f"{R}/logs/image/base.log",
    conda:
        "../envs/specrepro.yaml"
    params:
        base=CAMPAIGN.base_image_ref,
        runtime=CAMPAIGN.cfg["platform"]["container_runtime"],
    script:
        "../scripts/base_image.py"


rule image:
    input:
        base=f"{R}/image/base.json",
        tree_manifest=lambda w: arm_input_tree(CAMPAIGN, w.arm),
        verdicts=lambda w: CAMPAIGN.verdicts_for_arm(w.arm),
    output:
        f"{R}/image/{{arm}}.json",
    log:
        f"{R}/logs/image/{{arm}}.log",
    benchmark:
        f"{R}/benchmarks/image/{{arm}}.tsv"
    conda:
        "../envs/specrepro.yaml"
    params:
        platform=CAMPAIGN.cfg["platform"]["name"],
        series=lambda w: CAMPAIGN.series_of(w.arm),
    script:
        "../scripts/image.py"
