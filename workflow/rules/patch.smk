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
        entries=lambda w: CAMPAIGN.experiment["patch_series"][w.series],
        project_root=str(CAMPAIGN.project_root),
        cache_dir=str(CAMPAIGN.cache_dir),
    script:
        "../scripts/patch.py"
