# Small LMs trained from scratch on a dataset's sample or whole source; their
# checkpoints are models of their own (keyed <training>@step<N>) that every other stage
# measures.
#
# A training runs as a chain of jobs: its corpus packed once (its dataset's sample, or with
# corpus: source its whole source streamed to a file on disk, which the segments read
# memory-mapped; on a cluster, `snakemake download` packs a hub source where the network
# is), then one train_checkpoint job per segment (up to each checkpoint, then to the last
# step; with training.<key>.segment_steps also every that many steps, where a job saves only
# a resume point), each going on from the save of its predecessor; a checkpoint's model waits for its own segment only,
# so the early checkpoints are measured while the training goes on. The chain has a high
# priority (the scheduler starts it first) and MODEL_THREADS (half the cores: the others
# measure). A segment claims training.<key>.gpus GPUs (its gpu resource: SLURM's --gpus on
# one node) and runs data-parallel in that many processes that torchrun starts
# (layerlaws.training.segment_job), the same update as one process's.
# train_model combines the segments' records into the curve, manifest and summary.


rule pack_training_corpus:
    input:
        corpus=lambda wildcards: TARGETS.training_corpus(wildcards.training),
        held_out=on.by_wildcards(TARGETS.held_out_sentences),
        tokenizer=on.by_wildcards(TARGETS.training_tokenizer),
    output:
        sequences=f"{LAYOUT.training()}/sequences.npy",
        held_out=f"{LAYOUT.training()}/held_out_sequences.npy",
        corpus=f"{LAYOUT.training()}/corpus.json",
    log:
        LAYOUT.log("pack_training_corpus", "{training}"),
    priority: 50
    params:
        training=on.training_settings(config),
        source=lambda wildcards: TARGETS.training_source(wildcards.training),
    script:
        "../scripts/pack_training_corpus.py"


rule train_checkpoint:
    input:
        sequences=f"{LAYOUT.training()}/sequences.npy",
        held_out=f"{LAYOUT.training()}/held_out_sequences.npy",
        tokenizer=on.by_wildcards(TARGETS.training_tokenizer),
        previous=lambda wildcards: TARGETS.previous_step_record(
            wildcards.training, int(wildcards.step)
        ),
    output:
        LAYOUT.step_record(),
    log:
        LAYOUT.log("train_checkpoint", "{training}", "{step}"),
    wildcard_constraints:
        step=r"\d+",
    priority: 50
    threads: MODEL_THREADS
    resources:
        **needs("train_checkpoint"),
        # its GPUs on one node (SLURM's --nodes=1 beside --gpus=N)
        nodes=1,
    params:
        training=on.training_settings(config),
        checkpoint_folder=lambda wildcards: LAYOUT.checkpoints(wildcards.training),
    script:
        "../scripts/train_checkpoint.py"


rule train_model:
    input:
        records=lambda wildcards: TARGETS.step_records(wildcards.training),
        corpus=f"{LAYOUT.training()}/corpus.json",
    output:
        curve=f"{LAYOUT.training()}/curve.csv",
        checkpoints=LAYOUT.checkpoint_manifest(),
        summary=f"{LAYOUT.training()}/training.json",
    log:
        LAYOUT.log("train_model", "{training}"),
    params:
        training=on.training_settings(config),
    script:
        "../scripts/train_model.py"


rule plot_training:
    input:
        curve=f"{LAYOUT.training()}/curve.csv",
        summary=f"{LAYOUT.training()}/training.json",
    output:
        report(
            f"{LAYOUT.training()}/curve.{PLOT_FORMAT}",
            caption="../report/training_curve.rst",
            category="Training",
            subcategory="{training}",
        ),
    log:
        LAYOUT.log("plot_training", "{training}"),
    params:
        plots=plot_options(config),
        title="{training}",
    script:
        "../scripts/plot_training.py"
