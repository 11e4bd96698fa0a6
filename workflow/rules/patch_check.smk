rule patch_check:
    input:
        source_manifest=f"{R}/source/{{ref}}/manifest.json",
        source_tree=f"{R}/source/{{ref}}/tree",
        patch_manifest=f"{R}/patch/{{ref}}/{{series}}/manifest.json",
        patched_tree=f"{R}/patch/{{ref}}/{{series}}/tree",
        requirements="requirements/sglang-cpu.txt",
    output:
        verdict=f"{R}/patch_check/{{ref}}/{{series}}/verdict.json",
        markdown=f"{R}/patch_check/{{ref}}/{{series}}/verdict.md",
    log:
        f"{R}/logs/patch_check/{{ref}}/{{series}}.log",
    benchmark:
        f"{R}/benchmarks/patch_check/{{ref}}/{{series}}.tsv"
    conda:
        "../envs/specrepro.yaml"
    # CPU-heavy: on one host it takes the measurement slot, so no arm is
    # measured while it runs.
    resources:
        measurement=1,
    params:
        sglang=CAMPAIGN.cfg["sglang"],
        project_root=str(CAMPAIGN.project_root),
        cache_dir=str(CAMPAIGN.cache_dir),
    script:
        "../scripts/patch_check.py"
