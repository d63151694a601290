# Stage 4: hidden states of every layer for every text token (GPU when present).


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
        gpu=1,
    params:
        dtype=model_dtype,
    script:
        "../scripts/extract_hidden.py"
