"""Snakemake entry point: prepare a model as a local folder (results/models/{model})."""

import logging

from layerlaws.core.atomic import atomic_path
from layerlaws.core.logs import run_logged
from layerlaws.models.preparation import prepare_model


def main() -> None:
    with atomic_path(snakemake.output[0]) as folder:
        facts = prepare_model(snakemake.params.model, folder)
    logging.getLogger("layerlaws").info("prepared %s", facts)


run_logged(main, snakemake.log[0], snakemake.resources)
