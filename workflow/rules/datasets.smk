# Every data file the campaign reads (GSM8K's test set, the toy model's corpus, bench_serving's ShareGPT), resolved
# here on the submit host before any job reads it: fetched once where allowed, verified, recorded.  Jobs read the
# file from its path; none downloads inside a GPU job.
rule datasets:
    output:
        L.dataset(),
    log:
        L.log("datasets", "{dataset}"),
    conda:
        "../envs/specrepro.yaml"
    params:
        source=lambda w: CAMPAIGN.data_source(w.dataset),
        offline=CAMPAIGN.cfg["offline"],
    script:
        "../scripts/datasets.py"
