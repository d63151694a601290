"""The synthetic stage in the workflow (torch-free): its figures and its final outputs.
``layout`` and ``expanded`` are the workflow's ``Layout`` and ``ExpandedConfig``
(``layerlaws.pipeline``)."""

from __future__ import annotations

from typing import Any

PATHS = {
    "synthetic": "synthetic",
    "synthetic_task": "synthetic/{task}",
    "synthetic_model": "synthetic/{task}/{model}",
}
"""The stage's paths under the results folder (``Layout``): the stage's summary and
figures; an addition task's data and signatures; an embedding model trained on it."""

SYNTHETIC_FIGURES = (
    "dynamics",
    "embeddings",
    "signatures",
    "unembedding",
    "distinct_signatures",
    "signature_profiles",
    "unembedding_pca",
    "embedding_pca",
    "ffn_unembedding_pca",
)
"""The stage's figures, over every task and model (``plot_synthetic``)."""


def outputs(layout: Any, expanded: Any, plot_format: str) -> list[str]:
    """The summary, its comparison with the paper, each task's signature table and the
    figures; nothing without tasks."""
    tasks = expanded.config["synthetic"]["tasks"]
    if not tasks:
        return []
    folder = layout.synthetic()
    return [
        f"{folder}/summary.csv",
        f"{folder}/paper_comparison.csv",
        *[f"{layout.synthetic_task(task)}/signatures.csv" for task in tasks],
        *[f"{folder}/{name}.{plot_format}" for name in SYNTHETIC_FIGURES],
    ]
