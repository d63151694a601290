"""The probability-signature stage in the workflow (torch-free): its figures, its final
outputs and the checks of its config block and runs. ``layout`` and ``expanded`` are the
workflow's ``Layout`` and ``ExpandedConfig`` (``layerlaws.pipeline``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layerlaws.core.errors import LayerlawsError, require_key

PATHS = {
    "signatures": "signatures/{model}/{dataset}",
    "corpus_comparison": "signatures/{model}",
    "token_group": "signatures/{model}/{dataset}/token_groups/{group}",
    "own_corpus": "signatures/own_corpus/{own_corpus}",
}
"""The stage's paths under the results folder (``Layout``): a model's counts and signatures
on a corpus (a dataset or a pool); its signatures compared across its corpora; a chosen
group of tokens in one signature run (``signatures.token_groups``); a group of trained
models, each compared with its own training corpus."""

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
TOKEN_GROUP_TABLES = ("cosines", "next_tokens")
"""Tables of a ``signatures.token_groups`` group in one signature run (Yao & Xu Fig. 12);
its figure is ``heatmaps``."""


def group_runs(expanded: Any) -> list[tuple[str, str, str]]:
    """(model, corpus, group) of every ``signatures.token_groups`` group in every signature
    run of its models: a run's model matches a key of the group's ``models`` by its own key
    or by the key before its ``@`` (the training of a checkpoint, the model of a
    revision); ``models`` null matches every run."""
    return [
        (model, corpus, group)
        for model, corpus in expanded.signature_runs
        for group, settings in expanded.config["signatures"]["token_groups"].items()
        if settings["models"] is None or {model, model.partition("@")[0]} & set(settings["models"])
    ]


def outputs(layout: Any, expanded: Any, plot_format: str) -> list[str]:
    """Per signature run its R_cos and percentile tables and figures, per model its
    comparison across its corpora, per ``own_corpus`` group its tables and figures, per
    token group in each of its runs its tables and heatmaps."""
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
    for model, corpus, group in group_runs(expanded):
        folder = f"{layout.signatures(model, corpus)}/token_groups/{group}"
        paths += [f"{folder}/{table}.csv" for table in TOKEN_GROUP_TABLES]
        paths.append(f"{folder}/heatmaps.{plot_format}")
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


def check_token_groups(expanded: Any) -> None:
    """Each key of a ``signatures.token_groups`` group's ``models`` is a model or training
    key with a signature run."""
    run_models = {
        key for model, _ in expanded.signature_runs for key in (model, model.partition("@")[0])
    }
    for group, settings in expanded.config["signatures"]["token_groups"].items():
        for model in settings["models"] or ():
            if model not in run_models:
                raise LayerlawsError(
                    f"config signatures.token_groups.{group}.models names {model!r}, which has "
                    f"no signature run; add one (signatures.runs or own_corpus) or remove it; "
                    f"models with signature runs: {sorted(run_models)}"
                )
