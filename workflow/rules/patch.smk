rule patch:
    input:
        manifest=f"{R}/source/{{ref}}/manifest.json",
        tree=f"{R}/source/{{ref}}/tree",
        patches=lambda w: CAMPAIGN.local_patch_files(w.series),
    output:
        manifest=f"{R}/patch/{{ref}}/{{series}}/manifest.json",
        tree=directory(f"{R}/patch/{{ref}}/{{series}}/tree"),
    log:
        f"{R}/logs/patch/{{ref}}/{{series}}.log",
    conda:
        "../envs/specrepro.yaml"
    params:
        series_dir=lambda w: str(CAMPAIGN.series_dir(w.series)),
        cache_dir=str(CAMPAIGN.cache_dir),
    script:
        "../scripts/patch.py"
