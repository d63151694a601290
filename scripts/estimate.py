"""Snakemake entry point (`snakemake estimate`): what every model-running job of the config
will need, printed before anything runs, and every job planned to run longer than its
partition allows (``execution.partition_runtime_limits``); last, the GPU-hours of the
plan and its wall time on the ``--resources gpu=N`` given (1 when none)."""

from layerlaws.core.logs import run_logged
from layerlaws.pipeline.planning import JobPlanner, gpu_hours_line, plan_table, runtime_overruns


def main() -> None:
    planner = JobPlanner.from_config(snakemake.config)
    rows = planner.plan()
    print(plan_table(rows), flush=True)
    for line in runtime_overruns(rows, snakemake.params.partitions, planner.execution):
        print(line, flush=True)
    print(gpu_hours_line(rows, snakemake.params.gpus), flush=True)


run_logged(main, snakemake.log[0])
