rule source:
    input:
        tracking=TRACKING_CHECK,
    output:
        manifest=L.source_manifest(),
        tree=directory(L.source_tree()),
    log:
        L.log("source", "{ref}"),
    conda:
        "../envs/specrepro.yaml"
    params:
        sglang=CAMPAIGN.cfg["sglang"],
        cache_dir=str(CAMPAIGN.cache_dir),
    script:
        "../scripts/source.py"
