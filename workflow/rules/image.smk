# The base image resolved once per campaign: every arm runs that digest.
rule base_image:
    input:
        tracking=TRACKING_CHECK,
    output:
        L.base_image(),
    log:
        L.log("image", "base"),
    conda:
        "../envs/specrepro.yaml"
    params:
        base=CAMPAIGN.base_image_ref,
        runtime=CAMPAIGN.cfg["platform"]["container_runtime"],
        platform=CAMPAIGN.cfg["platform"],
        cache_dir=CAMPAIGN.cfg["cache_dir"],
    script:
        "../scripts/base_image.py"


rule image:
    input:
        base=L.base_image(),
        tree_manifest=lambda w: CAMPAIGN.tree_manifest(w.arm),
        verdicts=lambda w: PLANS[w.arm].patch_check_verdicts,
    output:
        L.image(),
    log:
        L.log("image", "{arm}"),
    benchmark:
        L.benchmark("image", "{arm}")
    conda:
        "../envs/specrepro.yaml"
    params:
        platform=CAMPAIGN.cfg["platform"]["name"],
        series=lambda w: PLANS[w.arm].series,
    script:
        "../scripts/image.py"
