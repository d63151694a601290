"""Snakemake entry point: fetch a hub model into the Hugging Face cache and record its
snapshot (results/downloads/{model}.json)."""

import logging

from layerlaws.core.atomic import write_json
from layerlaws.core.logs import run_logged
from layerlaws.models.downloads import download_model


def main() -> None:
    record = download_model(snakemake.params.model)
    write_json(snakemake.output[0], record)
    logging.getLogger("layerlaws").info(
        "%s at commit %s: %s", record["id"], record["commit"], record["snapshot"]
    )


run_logged(main, snakemake.log[0], snakemake.resources)
