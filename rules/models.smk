# Each model once as a local folder that later stages load fast
# (a GGUF is dequantised once, a hub model downloaded once).


# A hub model's files fetched into the Hugging Face cache (HF_HOME) and its snapshot
# recorded, where the network is: a local rule, so that under a cluster executor it runs
# on the submitting host, not on a compute node that may have no internet.
rule download_model:
    output:
        LAYOUT.model_download(),
    log:
        LAYOUT.log("download_model", "{model}"),
    # As its preparation's: a training's tokenizer model starts its chain.
    priority: 50
    localrule: True
    params:
        model=on.by_wildcards(TARGETS.download_settings),
    script:
        "../scripts/download_model.py"


rule prepare_model:
    input:
        on.by_wildcards(TARGETS.trained_weights),
        # The recorded commit is read from the cache; a newer record (a download run
        # again) reruns nothing: the source's settings are the params.
        download=ancient(on.by_wildcards(TARGETS.model_download)),
    output:
        directory(LAYOUT.model()),
    log:
        LAYOUT.log("prepare_model", "{model}"),
    # Before other ready jobs: a training's tokenizer model starts its chain, the longest.
    priority: 50
    params:
        model=on.by_wildcards(TARGETS.model_preparation),
    script:
        "../scripts/prepare_model.py"


# Not part of the pipeline: `snakemake download` makes, on a machine with the network,
# every output whose job reads the Hugging Face hub (the hub models' downloads, the hub
# datasets' samples, the hub corpora tokenised for the signatures), so that the run's jobs
# read only the cache (docs/gpus-and-clusters.md#compute-nodes-without-internet).
rule download:
    input:
        TARGETS.hub_reads(),
    localrule: True


# Not part of the pipeline: `snakemake estimate` prints what every model-running job of
# the config needs (GPUs, host memory, disk, runtime) before anything runs, and the jobs
# planned to run longer than their partition allows (`--profile profiles/slurm` gives the
# partitions).
rule estimate:
    log:
        LAYOUT.log("estimate"),
    localrule: True
    params:
        partitions=on.rule_partitions(workflow.rules, PLANNER),
        gpus=on.given_gpus(workflow.resource_settings.resources),
        training_gpus=TRAINING_GPUS,
    script:
        "../scripts/estimate.py"
