# Datasets the benchmark clients would otherwise download inside the GPU job (sglang's random/sharegpt datasets
# read ShareGPT): fetched once here, on the submit host, verified, and handed to the client read-only.
rule client_data:
    output:
        f"{R}/datasets/{{benchmark}}.json",
    log:
        f"{R}/logs/client_data/{{benchmark}}.log",
    conda:
        "../envs/specrepro.yaml"
    params:
        source=lambda w: CAMPAIGN.benchmark(w.benchmark)["serving"]["sharegpt"],
    script:
        "../scripts/client_data.py"
