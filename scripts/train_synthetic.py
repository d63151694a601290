"""Snakemake entry point: train one model kind on one addition task for every seed
(results/synthetic/{task}/{model}/)."""

import numpy as np
import polars as pl
import torch

from layerlaws.core.atomic import write_csv, write_npz
from layerlaws.core.logs import run_logged
from layerlaws.synthetic.models import train_addition
from layerlaws.synthetic.settings import SyntheticTrainingSettings
from layerlaws.synthetic.tasks import AdditionData


def main() -> None:
    settings = SyntheticTrainingSettings.from_params(snakemake.params)
    output, wildcards = snakemake.output, snakemake.wildcards
    torch.set_num_threads(snakemake.threads)
    task = settings.task(wildcards.task)
    with np.load(snakemake.input.data) as archive:
        data = AdditionData(**dict(archive))
    with np.load(snakemake.input.signatures) as archive:
        label_domain = archive["label_domain"]
    record = train_addition(task, wildcards.model, data, settings, label_domain)
    write_csv(output.r_order, pl.DataFrame(record.rows))
    write_npz(
        output.weights,
        {
            "epochs": np.array(record.epochs),
            "snapshot_epoch": np.array(record.snapshot_epoch),
            "seeds": np.array(settings.seeds),
            "anchors": np.array(task.anchors),
            "label_domain": label_domain,
            "anchor_embeddings": np.stack(record.anchor_embeddings),
            "label_unembeddings": np.stack(record.label_unembeddings),
        },
    )


run_logged(main, snakemake.log[0], snakemake.resources)
