# Stage 0: small LMs trained from scratch on a dataset's sample; their checkpoints are
# models of their own (keyed <training>@step<N>) that every other stage measures.


rule train_model:
    input:
        corpus=lambda wildcards: LAYOUT.sentences(training_config(wildcards)["dataset"]),
        held_out=held_out_sentences,
        tokenizer=lambda wildcards: LAYOUT.model(
            training_config(wildcards)["tokenizer"]
        ),
    output:
        curve=f"{LAYOUT.training()}/curve.csv",
        checkpoints=LAYOUT.checkpoint_manifest(),
        summary=f"{LAYOUT.training()}/training.json",
    log:
        LAYOUT.log("train_model", "{training}"),
    threads: 4
    resources:
        **needs(PLANNER.train_model),
    params:
        training=training_config,
        checkpoint_folder=lambda wildcards: LAYOUT.checkpoints(wildcards.training),
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
