# Stage 3: tokenisation of the sampled texts with each model's tokenizer.


rule tokenize:
    input:
        sentences=LAYOUT.sentences(),
        model=LAYOUT.model(),
    output:
        LAYOUT.tokens(),
    log:
        LAYOUT.log("tokenize", "{model}", "{dataset}"),
    params:
        max_tokens=lambda wildcards: dataset_config(wildcards)["max_tokens"],
        min_tokens=lambda wildcards: dataset_config(wildcards)["min_tokens"],
        token_budget=lambda wildcards: dataset_config(wildcards)["token_budget"],
        too_long=lambda wildcards: dataset_config(wildcards)["too_long"],
    script:
        "../scripts/tokenize_sentences.py"
