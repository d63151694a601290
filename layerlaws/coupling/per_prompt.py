"""The coupling of each prompt of a set and of each of its datasets, from the per-prompt
rows of ``depth.csv`` and the prompts' datasets and lengths (``prompts.csv``), torch-free.

Aubry et al. §5.4 aggregate a model's coupling prompt by prompt: "for each prompt,
m(A_{ll′}) is averaged over layers l, l′ ∈ {1…L}", then over the prompts of the six
leaderboard datasets. ``prompt_coupling`` is that per-prompt mean for every metric and K
(m of Eq. 13 is the ``unnormalised`` metric), beside the mean over l ≠ l′;
``dataset_coupling`` averages it over each dataset's prompts (the coupling of each
dataset behind their Table 3, whose R² across datasets needs each model's score on every
dataset); their Fig. 10 (right) draws it against the prompt's length in tokens
(``length_panel``).
"""

from __future__ import annotations

import polars as pl

PER_PROMPT_SCHEMA = {
    "weights": pl.String,
    "prompt": pl.Int64,
    "dataset": pl.String,
    "tokens": pl.Int64,
    "k": pl.Int64,
    "metric": pl.String,
    "miscoupling_all": pl.Float64,
    "miscoupling_offdiagonal": pl.Float64,
}
"""Columns of ``prompt_coupling.csv``."""
PER_DATASET_SCHEMA = {
    "weights": pl.String,
    "dataset": pl.String,
    "k": pl.Int64,
    "metric": pl.String,
    "prompts": pl.Int64,
    "tokens_mean": pl.Float64,
    "miscoupling_all": pl.Float64,
    "miscoupling_offdiagonal": pl.Float64,
}
"""Columns of ``datasets.csv``."""


def prompt_coupling(depth: pl.DataFrame, prompts: pl.DataFrame) -> pl.DataFrame:
    """Per weights, prompt with Jacobians, K and metric (in the order of ``depth``, a
    ``depth.csv`` with ``prompt`` read as text): ``miscoupling_all``, the metric's mean
    over all layer pairs l, l′ ∈ {1…L}, and ``miscoupling_offdiagonal``, over l ≠ l′; with
    the prompt's ``dataset`` (null: one of the set's own texts) and ``tokens`` from
    ``prompts`` (a ``prompts.csv``). Columns ``PER_PROMPT_SCHEMA``."""
    rows = depth.filter(pl.col("prompt") != "mean").with_columns(pl.col("prompt").cast(pl.Int64))
    off_diagonal = pl.col("layer_a") != pl.col("layer_b")
    means = rows.group_by("weights", "prompt", "k", "metric", maintain_order=True).agg(
        miscoupling_all=pl.col("miscoupling").mean(),
        miscoupling_offdiagonal=pl.col("miscoupling").filter(off_diagonal).mean(),
    )
    sources = prompts.select("prompt", "dataset", "tokens")
    return means.join(sources, on="prompt", how="left", maintain_order="left").select(
        [pl.col(name).cast(kind) for name, kind in PER_PROMPT_SCHEMA.items()]
    )


def dataset_coupling(per_prompt: pl.DataFrame) -> pl.DataFrame:
    """Per weights, dataset (null: the set's own texts), K and metric, in the order of
    ``per_prompt`` (``prompt_coupling``'s table): ``prompts`` (with Jacobians),
    ``tokens_mean`` (their mean length) and the means over them of ``miscoupling_all``
    and ``miscoupling_offdiagonal``. Columns ``PER_DATASET_SCHEMA``."""
    return (
        per_prompt.group_by("weights", "dataset", "k", "metric", maintain_order=True)
        .agg(
            prompts=pl.len(),
            tokens_mean=pl.col("tokens").mean(),
            miscoupling_all=pl.col("miscoupling_all").mean(),
            miscoupling_offdiagonal=pl.col("miscoupling_offdiagonal").mean(),
        )
        .select([pl.col(name).cast(kind) for name, kind in PER_DATASET_SCHEMA.items()])
    )


LENGTH_METRIC = "unnormalised"
"""The metric of the prompt-length panel: m of Eq. 13, whose mean over the layer pairs is
a prompt's coupling in Aubry et al. §5.4."""
FALLBACK_METRIC = "paper"
"""Its metric where m was not measured: m̃ of Eq. 14."""


def length_panel(per_prompt: pl.DataFrame) -> pl.DataFrame:
    """The points of the prompt-length panel (Aubry et al., Fig. 10, right) from
    ``prompt_coupling``'s table: per weights and prompt, its ``dataset``, ``tokens`` and
    ``coupling`` = −``miscoupling_all`` by ``LENGTH_METRIC`` (``FALLBACK_METRIC`` where it
    was not measured) at the smallest K, with that ``metric`` and ``k``."""
    measured = set(per_prompt["metric"].to_list())
    metric = LENGTH_METRIC if LENGTH_METRIC in measured else FALLBACK_METRIC
    rows = per_prompt.filter(pl.col("metric") == metric)
    return rows.filter(pl.col("k") == rows["k"].min()).select(
        "weights",
        "prompt",
        "dataset",
        "tokens",
        "metric",
        "k",
        coupling=-pl.col("miscoupling_all"),
    )
