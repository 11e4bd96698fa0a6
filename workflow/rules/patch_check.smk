# A patch series checked on a CPU: the generic checks every series gets, then the series' own CPU checks
# (patches/<series>/series.yaml, through the check protocol of patches/README.md).
rule patch_check:
    input:
        source_manifest=f"{R}/source/{{ref}}/manifest.json",
        source_tree=f"{R}/source/{{ref}}/tree",
        patch_manifest=f"{R}/patch/{{ref}}/{{series}}/manifest.json",
        patched_tree=f"{R}/patch/{{ref}}/{{series}}/tree",
        requirements="requirements/sglang-cpu.txt",
        checks=lambda w: CAMPAIGN.check_files(w.series, "cpu"),
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
        series_dir=lambda w: str(CAMPAIGN.series_dir(w.series)),
        cache_dir=str(CAMPAIGN.cache_dir),
    script:
        "../scripts/patch_check.py"
