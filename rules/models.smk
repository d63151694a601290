# Stage 2: each model once as a local folder that later stages load fast
# (a GGUF is dequantised once, a hub model downloaded once).


rule prepare_model:
    input:
        trained_weights,
    output:
        directory(LAYOUT.model()),
    log:
        LAYOUT.log("prepare_model", "{model}"),
    # Before other ready jobs: a training's tokenizer model starts its chain, the longest.
    priority: 50
    params:
        model=model_preparation,
    script:
        "../scripts/prepare_model.py"


# Not part of the pipeline: `snakemake estimate` prints what every model-running job of
# the config needs (GPUs, host memory, disk, runtime) before anything runs, and the jobs
# planned to run longer than their partition allows (`--profile profiles/slurm` gives the
# partitions).
rule estimate:
    log:
        LAYOUT.log("estimate"),
    localrule: True
    params:
        partitions=rule_partitions,
        gpus=given_gpus(),
    script:
        "../scripts/estimate.py"
