"""The probability-signature stage in the workflow (torch-free): its figures, its final
outputs and the checks of its config block and runs. ``layout`` and ``expanded`` are the
workflow's ``Layout`` and ``ExpandedConfig`` (``layerlaws.pipeline``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layerlaws.core.errors import LayerlawsError, require_key

SIGNATURE_FIGURES = ("heatmaps", "deciles", "per_token", "digits")
"""The figures of one model on one corpus (``plot_signatures``)."""
OWN_CORPUS_FIGURES = (
    "rcos_by_dataset",
    "per_token_by_dataset",
    "pooled_deciles",
    "pooled_histograms",
)
"""Figures of a ``signatures.own_corpus`` group (Yao & Xu Fig. 5B, 5C, 5E, 11)."""
OWN_CORPUS_TABLES = ("rcos_by_dataset", "pooled_deciles", "pooled_percentile_bins")
"""Tables of a ``signatures.own_corpus`` group (the figures' data)."""


def outputs(layout: Any, expanded: Any, plot_format: str) -> list[str]:
    """Per signature run its R_cos and percentile tables and figures, per model its
    comparison across its corpora, per ``own_corpus`` group its tables and figures."""
    paths = []
    for model, corpus in expanded.signature_runs:
        folder = layout.signatures(model, corpus)
        paths += [f"{folder}/rcos.csv", f"{folder}/percentiles.csv"]
        paths += [f"{folder}/{name}.{plot_format}" for name in SIGNATURE_FIGURES]
    for model in dict.fromkeys(model for model, _ in expanded.signature_runs):
        folder = layout.corpus_comparison(model)
        paths += [
            f"{folder}/rcos_by_corpus.csv",
            f"{folder}/rcos_by_corpus.{plot_format}",
            f"{folder}/per_token_by_corpus.{plot_format}",
        ]
    for name in expanded.own_corpus:
        folder = layout.own_corpus(name)
        paths += [f"{folder}/{table}.csv" for table in OWN_CORPUS_TABLES]
        paths += [f"{folder}/{figure}.{plot_format}" for figure in OWN_CORPUS_FIGURES]
    return paths


def check_own_corpus(config: Mapping[str, Any]) -> None:
    """Each ``signatures.own_corpus`` group names trainings that save their final step."""
    for name, trainings in config["signatures"]["own_corpus"].items():
        for training in trainings:
            require_key(f"signatures.own_corpus.{name}", training, "training", config["training"])
            settings = config["training"][training]
            if isinstance(settings["checkpoints"], list) and (
                settings["steps"] not in settings["checkpoints"]
            ):
                raise LayerlawsError(
                    f"config signatures.own_corpus.{name} compares training {training!r} "
                    f"after its last step, but training.{training}.checkpoints does not save "
                    f"step {settings['steps']}; add it"
                )


def check_signatures(expanded: Any) -> None:
    """Pools name datasets, pool names differ from dataset keys, signature runs name a
    model (after expansion) and a dataset or pool."""
    pools, datasets = expanded.config["signatures"]["pools"], expanded.config["datasets"]
    for pool, members in pools.items():
        if pool in datasets:
            raise LayerlawsError(
                f"config signatures.pools.{pool}: a pool may not share its name with a "
                f"dataset; rename it"
            )
        for member in members:
            if member not in datasets:
                raise LayerlawsError(
                    f"config signatures.pools.{pool} names {member!r}, which is not a key "
                    f"of datasets; known datasets: {sorted(datasets)}"
                )
    corpora = sorted([*datasets, *pools])
    for index, (model, corpus) in enumerate(expanded.signature_runs):
        require_key(f"signatures.runs[{index}].model", model, "models", expanded.models)
        if corpus not in corpora:
            raise LayerlawsError(
                f"config signatures.runs[{index}].dataset is {corpus!r}, which is "
                f"neither a dataset nor a pool; known: {corpora}"
            )
