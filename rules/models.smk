# Stage 2: each model once as a local folder that later stages load fast
# (a GGUF is dequantised once, a hub model downloaded once).


rule prepare_model:
    input:
        trained_weights,
    output:
        directory(LAYOUT.model()),
    log:
        LAYOUT.log("prepare_model", "{model}"),
    params:
        model=model_preparation,
    script:
        "../scripts/prepare_model.py"


# Not part of the pipeline: `snakemake estimate` prints what every model-running job of
# the config needs (GPUs, host memory, disk, runtime) before anything runs.
rule estimate:
    log:
        LAYOUT.log("estimate"),
    localrule: True
    script:
        "../scripts/estimate.py"
