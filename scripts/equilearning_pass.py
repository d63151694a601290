"""Snakemake entry point of ``equilearning_pass`` and ``equilearning_pass_shard``: one
forward pass of a model over a dataset's tokens that streams the equi-learning statistics
and writes the PR, fuzziness, token-view and evaluation tables
(results/equilearning/…/pr.csv), and the named observers' (``equilearning.observers``:
results/equilearning/…/observers/<name>.csv); with ``equilearning.shards`` above 1, a shard
job's part into shards/{shard}.pt, merged by ``equilearning_pass``
(``layerlaws.equilearning.pass_job``)."""

from layerlaws.core.logs import run_logged
from layerlaws.equilearning.pass_job import run_pass_job
from layerlaws.pipeline.execution import Execution

run_logged(
    lambda: run_pass_job(snakemake, Execution.from_config(snakemake.config)),
    snakemake.log[0],
    snakemake.resources,
)
