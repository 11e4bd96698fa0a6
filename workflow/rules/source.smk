rule source:
    output:
        manifest=f"{R}/source/{{ref}}/manifest.json",
        tree=directory(f"{R}/source/{{ref}}/tree"),
    log:
        f"{R}/logs/source/{{ref}}.log",
    conda:
        "../envs/specrepro.yaml"
    params:
        sglang=CAMPAIGN.cfg["sglang"],
        cache_dir=str(CAMPAIGN.cache_dir),
    script:
        "../scripts/source.py"
