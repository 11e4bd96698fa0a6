rule patch:
    input:
        manifest=L.source_manifest(),
        tree=L.source_tree(),
        patches=lambda w: CAMPAIGN.local_patch_files(w.series),
    output:
        manifest=L.patch_manifest(),
        tree=directory(L.patch_tree()),
    log:
        L.log("patch", "{ref}", "{series}"),
    conda:
        "../envs/specrepro.yaml"
    params:
        series_dir=lambda w: str(CAMPAIGN.series_dir(w.series)),
        cache_dir=str(CAMPAIGN.cache_dir),
    script:
        "../scripts/patch.py"
