# Every layer's hidden states, kept only when hidden_states.keep asks for them (the
# statistics of the pipeline are streamed from the equi-learning pass instead).
from layerlaws.forward.settings import MaskingSettings


rule extract_hidden:
    input:
        tokens=LAYOUT.tokens(),
        model=LAYOUT.model(),
    output:
        directory(LAYOUT.hidden()),
    log:
        LAYOUT.log("extract_hidden", "{model}", "{dataset}"),
    threads: MODEL_THREADS
    resources:
        **needs("extract_hidden"),
    params:
        dtype=on.model_setting(EXPANDED, "dtype"),
        quantization=on.model_quantization(EXPANDED, "passes"),
        storage_dtype=EXPANDED.hidden_states["dtype"],
        special_tokens=config["equilearning"]["special_tokens"],
        probe=on.model_setting(EXPANDED, "probe", "auto"),
        masking=MaskingSettings.params(config["equilearning"]["masking"]),
        encoder_decoder=config["equilearning"]["encoder_decoder"],
        layer_states=config["equilearning"]["layer_states"],
    script:
        "../scripts/extract_hidden.py"
