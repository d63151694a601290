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
# the config needs (GPUs, host memory, disk, runtime) before anything runs, and the jobs
# planned to run longer than their partition allows (`--profile profiles/slurm` gives the
# partitions).
def rule_partitions(wildcards):
    """Rule name → its `slurm_partition` resource as Snakemake resolved it (default-resources,
    the rule's own, set-resources), or None where none is set."""
    found = {}
    for rule in workflow.rules:
        partition = rule.resources.get("slurm_partition")
        if partition is not None:
            partition = partition.evaluate(
                wildcards=wildcards,
                input=[],
                attempt=1,
                threads=1,
                rulename=rule.name,
                async_run=None,
            ).value
        found[rule.name] = partition
    return found


rule estimate:
    log:
        LAYOUT.log("estimate"),
    localrule: True
    params:
        partitions=rule_partitions,
    script:
        "../scripts/estimate.py"
