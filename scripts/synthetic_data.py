"""Snakemake entry point: one addition task's data and probability signatures
(results/synthetic/{task}/)."""

from dataclasses import asdict

import numpy as np
import polars as pl

from layerlaws.core.atomic import write_csv, write_npz
from layerlaws.core.logs import run_logged
from layerlaws.synthetic.settings import SyntheticDataSettings
from layerlaws.synthetic.tasks import generate, signature_table, signatures


def main() -> None:
    settings, output = SyntheticDataSettings.from_params(snakemake.params), snakemake.output
    task = settings.task(snakemake.wildcards.task)
    data = generate(task, settings.n_samples, settings.test_fraction, settings.data_seed)
    write_npz(output.data, asdict(data))
    found = signatures(task, data.train_inputs, data.train_labels, settings.signature_inputs)
    write_npz(
        output.signatures,
        {
            **asdict(found),
            "anchors": np.array(task.anchors),
            "signature_inputs": np.array(settings.signature_inputs),
        },
    )
    write_csv(output.summary, pl.DataFrame(signature_table(task, found)))


run_logged(main, snakemake.log[0], snakemake.resources)
