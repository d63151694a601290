"""Snakemake entry point of ``measure_coupling`` and ``measure_coupling_shard``: block
coupling and trajectories of a prompt set, for the trained model and its randomly
initialised twin, or for a training checkpoint its own step-0 weights
(results/coupling/{model}/{prompts}/, trajectories in its trajectories/); with
``coupling.shards`` above 1, a shard job's prompts into shards/{shard}.pt, merged by
``measure_coupling`` (``layerlaws.coupling.job``). The Jacobians are measured on the prompt
set's subset (``layerlaws.coupling.subset``); prompts.csv says where each prompt comes from
and whether its Jacobians were measured. The tables hold every prompt; the arrays
(streams.npz, factors.npz, couplings.npz) and token-wise rows (tokens.csv; token_means.csv
has every prompt's means) the prompts ``coupling.keep_arrays`` keeps
(``layerlaws.coupling.kept``: by default those the figures draw).

Each prompt's measurement is written to a file of its own beside the job's first output as
soon as it is measured (``.resume/depth.csv.prompts/``), and how many are done is saved
there (``.resume/depth.csv.pt``, ``layerlaws.core.progress``) at most every
``execution.checkpoint_minutes``; a rerun after a kill measures only the prompts left. The
outputs are written from the files a prompt at a time, then the files and the save are
removed."""

from layerlaws.core.logs import run_logged
from layerlaws.coupling.job import run_coupling_job
from layerlaws.pipeline.execution import Execution

run_logged(
    lambda: run_coupling_job(snakemake, Execution.from_config(snakemake.config)),
    snakemake.log[0],
    snakemake.resources,
)
