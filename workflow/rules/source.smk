rule source:
    output:
        manifest=f"{R}/source/{{ref}}/manifest.json",
        tree=directory(f"{R}/source/{{ref}}/tree"),
    params:
        sglang=CAMPAIGN.cfg["sglang"],
        cache_dir=str(CAMPAIGN.cache_dir),
    log:
        f"{R}/logs/source/{{ref}}.log",
    resources:
        gpu=0,
    script:
        "../scripts/source.py"
