# A patch series checked on a CPU: the generic checks every series gets, then the series' own CPU checks
# (patches/<series>/series.yaml, through the check protocol of patches/README.md).
rule patch_check:
    input:
        source_manifest=L.source_manifest(),
        source_tree=L.source_tree(),
        patch_manifest=L.patch_manifest(),
        patched_tree=L.patch_tree(),
        requirements="requirements/sglang-cpu.txt",
        checks=lambda w: CAMPAIGN.check_files(w.series, "cpu"),
    output:
        verdict=L.patch_check(),
        markdown=L.patch_check(suffix="md"),
    log:
        L.log("patch_check", "{ref}", "{series}"),
    benchmark:
        L.benchmark("patch_check", "{ref}", "{series}")
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
