# Tokenisation of the sampled texts with each model's tokenizer.


rule tokenize:
    input:
        sentences=LAYOUT.sentences(),
        model=LAYOUT.model(),
    output:
        LAYOUT.tokens(),
    log:
        LAYOUT.log("tokenize", "{model}", "{dataset}"),
    params:
        max_tokens=on.config_entry(config, "datasets", "dataset", "max_tokens"),
        min_tokens=on.config_entry(config, "datasets", "dataset", "min_tokens"),
        token_budget=on.config_entry(config, "datasets", "dataset", "token_budget"),
        too_long=on.config_entry(config, "datasets", "dataset", "too_long"),
    script:
        "../scripts/tokenize_sentences.py"
