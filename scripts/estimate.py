"""Snakemake entry point (`snakemake estimate`): what every model-running job of the config
will need, printed before anything runs."""

from layerlaws.core.logs import run_logged
from layerlaws.pipeline.planning import JobPlanner, plan_table


def main() -> None:
    print(plan_table(JobPlanner.from_config(snakemake.config).plan()), flush=True)


run_logged(main, snakemake.log[0])
