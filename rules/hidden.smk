# Every layer's hidden states, kept only when hidden_states.keep asks for them (the
# statistics of the pipeline are streamed from the equi-learning pass instead).


rule extract_hidden:
    input:
        tokens="results/tokens/{model}/{dataset}.parquet",
        model="results/models/{model}",
    output:
        directory("results/hidden/{model}/{dataset}"),
    log:
        "results/logs/extract_hidden/{model}/{dataset}.log",
    threads: 4
    resources:
        **needs(PLANNER.extract_hidden),
    params:
        dtype=model_dtype,
        storage_dtype=config["hidden_states"]["dtype"],
        special_tokens=config["equilearning"]["special_tokens"],
        probe=model_probe,
        masking=config["equilearning"]["masking"],
    script:
        "../scripts/extract_hidden.py"
