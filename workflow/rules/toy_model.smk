# A model the pipeline builds itself (model.toy): the target + draft pair and what theory says they do.
if CAMPAIGN.toy_theory:

    rule toy_model:
        input:
            corpus=L.dataset("toy_corpus"),
        output:
            CAMPAIGN.toy_theory,
        log:
            L.log("toy_model"),
        conda:
            "../envs/specrepro.yaml"
        params:
            toy=CAMPAIGN.cfg["model"]["toy"],
            corpus=CAMPAIGN.data_source("toy_corpus")[0],
            num_steps=CAMPAIGN.cfg["model"]["server_args"].get(
                "speculative_num_steps", 3
            ),
        script:
            "../scripts/toy_model.py"
