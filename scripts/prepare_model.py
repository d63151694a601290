"""Snakemake entry point: prepare a model as a local folder (results/models/{model})."""

import logging

from layerlaws.core.atomic import atomic_path
from layerlaws.core.logs import run_logged
from layerlaws.models.downloads import read_record
from layerlaws.models.preparation import prepare_model


def main() -> None:
    records = snakemake.input.download  # a hub model's download (none for other sources)
    download = read_record(records[0]) if records else None
    with atomic_path(snakemake.output[0]) as folder:
        facts = prepare_model(snakemake.params.model, folder, download)
    logging.getLogger("layerlaws").info("prepared %s", facts)


run_logged(main, snakemake.log[0], snakemake.resources)
