# Stage 3: tokenisation of the sampled texts with each model's tokenizer.


rule tokenize:
    input:
        sentences="results/corpus/{dataset}/sentences.parquet",
        model="results/models/{model}",
    output:
        "results/tokens/{model}/{dataset}.parquet",
    log:
        "results/logs/tokenize/{model}/{dataset}.log",
    params:
        max_tokens=lambda wildcards: dataset_config(wildcards)["max_tokens"],
        min_tokens=lambda wildcards: dataset_config(wildcards)["min_tokens"],
        token_budget=lambda wildcards: dataset_config(wildcards)["token_budget"],
        too_long=lambda wildcards: dataset_config(wildcards)["too_long"],
    script:
        "../scripts/tokenize_sentences.py"
