"""Snakemake entry point: the coupling of each prompt and of each dataset of one model ×
prompt set (prompt_coupling.csv, datasets.csv) and coupling against prompt length
(``layerlaws.coupling.per_prompt``)."""

import polars as pl

from layerlaws.core.atomic import write_csv
from layerlaws.core.logs import run_logged
from layerlaws.coupling.per_prompt import dataset_coupling, length_panel, prompt_coupling
from layerlaws.coupling.plots import plot_prompt_length


def main() -> None:
    params, output = snakemake.params, snakemake.output
    depth = pl.read_csv(snakemake.input.depth, schema_overrides={"prompt": pl.String})
    prompts = pl.read_csv(snakemake.input.prompts, schema_overrides={"dataset": pl.String})
    per_prompt = prompt_coupling(depth, prompts)
    write_csv(output.prompt_coupling, per_prompt)
    write_csv(output.datasets, dataset_coupling(per_prompt))
    plot_prompt_length(
        length_panel(per_prompt),
        path=output.prompt_length,
        title=params.title,
        options=params.plots,
    )


run_logged(main, snakemake.log[0], snakemake.resources)
