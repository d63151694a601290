# Stage 0: small LMs trained from scratch on a dataset's sample; their checkpoints are
# models of their own (keyed <training>@step<N>) that every other stage measures.


rule train_model:
    input:
        corpus=lambda wildcards: sentences_of(training_config(wildcards)["dataset"]),
        held_out=held_out_sentences,
        tokenizer=lambda wildcards: f"results/models/{training_config(wildcards)['tokenizer']}",
    output:
        curve="results/training/{training}/curve.csv",
        checkpoints="results/training/{training}/checkpoints.csv",
        summary="results/training/{training}/training.json",
    log:
        "results/logs/train_model/{training}.log",
    threads: 4
    resources:
        **needs(PLANNER.train_model),
    params:
        training=training_config,
        checkpoint_folder=lambda wildcards: checkpoint_folder(wildcards.training),
    script:
        "../scripts/train_model.py"


rule plot_training:
    input:
        curve="results/training/{training}/curve.csv",
        summary="results/training/{training}/training.json",
    output:
        report(
            f"results/training/{{training}}/curve.{PLOT_FORMAT}",
            caption="../report/training_curve.rst",
            category="Training",
            subcategory="{training}",
        ),
    log:
        "results/logs/plot_training/{training}.log",
    params:
        plots=plot_options(),
        title="{training}",
    script:
        "../scripts/plot_training.py"
