"""Cross-checks of a validated config that its JSON schema cannot state: every key it
names refers to something the config defines. Each check raises LayerlawsError with the
key at fault and what is known instead.

``check_trainings`` and ``check_series`` read the config as written; ``check_runs``,
``check_signatures`` and ``check_coupling`` read it after expansion, given the expanded
``models`` and the runs of each stage (the config's runs and those of its series).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from layerlaws.core.errors import LayerlawsError
from layerlaws.text.corpus import prompt_datasets

Run = Mapping[str, str]


def require_key(where: str, value: Any, table: str, known: Collection[str]) -> None:
    """Raise unless ``value`` (the config's value at the dotted key ``where``) is one of
    ``known``, the keys of the config's ``table``."""
    if value not in known:
        raise LayerlawsError(
            f"config {where} is {value!r}, which is not a key of {table}; known {table}: "
            f"{sorted(known)}"
        )


def check_trainings(config: Mapping[str, Any]) -> None:
    """Each training names a model (its tokenizer) and datasets, and has whole epochs."""
    for key, training in config["training"].items():
        for field, table in (
            ("tokenizer", "models"),
            ("dataset", "datasets"),
            ("held_out", "datasets"),
        ):
            if training[field] is not None:
                require_key(f"training.{key}.{field}", training[field], table, config[table])
        epochs = training.get("epochs")
        if epochs is not None and training["steps"] % epochs:
            raise LayerlawsError(
                f"config training.{key}.epochs is {epochs}, and steps ({training['steps']}) is "
                f"not a multiple of it: each epoch must be whole steps; make steps a multiple "
                f"of epochs"
            )


def check_series(config: Mapping[str, Any]) -> None:
    """Each series names known datasets, prompts and corpora, and leaves out of its fits
    only its own members (a key it lists, or one revision or checkpoint ``<key>@…`` of
    it)."""
    corpora = {*config["datasets"], *config["signatures"]["pools"], "training_corpus"}
    for name, series in config["series"].items():
        listed = {entry if isinstance(entry, str) else entry["model"] for entry in series["models"]}
        for excluded in series["exclude_from_fits"]:
            if excluded.partition("@")[0] not in listed:
                raise LayerlawsError(
                    f"config series.{name}.exclude_from_fits names {excluded!r}, which is not "
                    f"a member of the series; its models: {sorted(listed)}"
                )
        for field, known in (
            ("datasets", config["datasets"]),
            ("prompts", config["coupling"]["prompts"]),
            ("signatures", corpora),
        ):
            values = series[field] if field == "datasets" else [series[field]]
            for value in values:
                if value is not None and value not in known:
                    raise LayerlawsError(
                        f"config series.{name}.{field} names {value!r}; known: {sorted(known)}"
                    )


def check_runs(config: Mapping[str, Any], models: Mapping[str, Any], runs: Sequence[Run]) -> None:
    """Every equi-learning run names a model (after expansion) and a dataset."""
    tables = {"model": ("models", models), "dataset": ("datasets", config["datasets"])}
    for index, run in enumerate(runs):
        for kind, (table, known) in tables.items():
            require_key(f"runs[{index}].{kind}", run[kind], table, known)


def check_signatures(
    config: Mapping[str, Any], models: Mapping[str, Any], runs: Sequence[Run]
) -> None:
    """Pools name datasets, pool names differ from dataset keys, signature runs name a
    model (after expansion) and a dataset or pool."""
    pools, datasets = config["signatures"]["pools"], config["datasets"]
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
    for index, run in enumerate(runs):
        require_key(f"signatures.runs[{index}].model", run["model"], "models", models)
        if run["dataset"] not in corpora:
            raise LayerlawsError(
                f"config signatures.runs[{index}].dataset is {run['dataset']!r}, which is "
                f"neither a dataset nor a pool; known: {corpora}"
            )


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


def check_coupling(
    config: Mapping[str, Any], models: Mapping[str, Any], runs: Sequence[Run]
) -> None:
    """Prompt sets name datasets; coupling runs name a model (after expansion) and a
    prompt set."""
    prompt_sets = config["coupling"]["prompts"]
    tables = {"model": ("models", models), "prompts": ("coupling.prompts", prompt_sets)}
    for name, prompts in prompt_sets.items():
        for dataset in prompt_datasets(prompts):
            if dataset not in config["datasets"]:
                raise LayerlawsError(
                    f"config coupling.prompts.{name}.dataset names {dataset!r}, which is "
                    f"not a key of datasets; known datasets: {sorted(config['datasets'])}"
                )
    for index, run in enumerate(runs):
        for kind, (table, known) in tables.items():
            require_key(f"coupling.runs[{index}].{kind}", run[kind], table, known)
