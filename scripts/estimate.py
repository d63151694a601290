"""Snakemake entry point (`snakemake estimate`): what every model-running job of the config
will need, printed before anything runs, and every job planned to run longer than its
partition allows (``execution.partition_runtime_limits``)."""

from layerlaws.core.logs import run_logged
from layerlaws.pipeline.planning import JobPlanner, plan_table, runtime_overruns


def main() -> None:
    planner = JobPlanner.from_config(snakemake.config)
    rows = planner.plan()
    print(plan_table(rows), flush=True)
    for line in runtime_overruns(rows, snakemake.params.partitions, planner.execution):
        print(line, flush=True)


run_logged(main, snakemake.log[0])
