"""Snakemake entry point: the packed sequences a training read, as token shards
(results/training/{training}/counts/shards) for its own-corpus signatures."""

import logging

import numpy as np

from layerlaws.core.atomic import atomic_path
from layerlaws.core.logs import run_logged
from layerlaws.models.loading import load_tokenizer
from layerlaws.text.tokens import packed_token_shards
from layerlaws.training.train import separator_id


def main() -> None:
    separator = separator_id(load_tokenizer(snakemake.input.tokenizer))
    sequences = np.load(snakemake.input.sequences, mmap_mode="r")  # read a shard at a time
    with atomic_path(snakemake.output[0]) as folder:
        counts = packed_token_shards(sequences, separator, folder)
    logging.getLogger("layerlaws").info("trained tokens: %s", counts)


run_logged(main, snakemake.log[0], snakemake.resources)
