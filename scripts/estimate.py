"""Snakemake entry point (`snakemake estimate`): what every model-running job of the config
will need, printed before anything runs, and every job planned to run longer than its
partition allows (``execution.partition_runtime_limits``); each training's tokens against
its corpus; last, the GPU-hours of the plan and its wall time on the ``--resources gpu=N``
given (1 when none)."""

from layerlaws.core.logs import run_logged
from layerlaws.pipeline.planning import JobPlanner, gpu_hours_line, plan_table, runtime_overruns
from layerlaws.training.epochs import corpus_line
from layerlaws.training.scheduling import packed_corpus


def training_lines(planner: JobPlanner) -> list[str]:
    """``corpus_line`` of every training, with its packed corpus's facts once packed."""
    lines = []
    for key, settings in planner.config["training"].items():
        dataset = planner.config["datasets"][settings["dataset"]]
        vocab_size = planner.size(settings["tokenizer"])[0].vocab_size
        lines.append(corpus_line(key, settings, dataset, vocab_size, packed_corpus(planner, key)))
    return lines


def main() -> None:
    planner = JobPlanner.from_config(snakemake.config, training_gpus=snakemake.params.training_gpus)
    rows = planner.plan()
    print(plan_table(rows), flush=True)
    for line in runtime_overruns(rows, snakemake.params.partitions, planner.execution):
        print(line, flush=True)
    for line in training_lines(planner):
        print(line, flush=True)
    print(gpu_hours_line(rows, snakemake.params.gpus), flush=True)


run_logged(main, snakemake.log[0], snakemake.resources)
