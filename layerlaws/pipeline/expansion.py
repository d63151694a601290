"""Series of models (checkpoints, sizes, families) in a validated config, expanded into the
models and runs the stages measure.

- A model with ``revisions`` stands for one model per revision, keyed
  ``<key>@<revision>`` (a hub model's checkpoints, written once).
- A ``training.<key>`` stands for one model per checkpoint, keyed ``<key>@step<N>``,
  whose weights the training stage writes.
- ``series.<name>`` is an ordered list of such models with an x value each and what x
  means; its datasets, prompts and signature corpus become runs of every member.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.shards import Sharding
from layerlaws.pipeline.layout import Layout
from layerlaws.pipeline.stages import STAGES
from layerlaws.series.workflow import TRAINING_CORPUS
from layerlaws.text.corpus import prompt_datasets
from layerlaws.training.plan import checkpoint_folder, checkpoint_steps

STEP_REVISION = re.compile(r"^step(\d+)$")


@dataclass(frozen=True)
class SeriesMember:
    """One model of a series and its x (None: read later, for ``parameters``)."""

    model: str
    x: float | str | None


def checkpoint_key(training: str, step: int) -> str:
    return f"{training}@step{step}"


def revision_key(model: str, revision: str) -> str:
    return f"{model}@{revision}"


def expand_models(
    config: Mapping[str, Any], checkpoint_path: Callable[[str, int], str]
) -> dict[str, dict[str, Any]]:
    """Every model the config measures: its models, one per revision of those with
    ``revisions``, and one per checkpoint of every training (``checkpoint_path(training,
    step)`` is where that checkpoint's weights will lie)."""
    models: dict[str, dict[str, Any]] = {}
    for key, settings in config["models"].items():
        revisions = settings.get("revisions")
        if not revisions:
            models[key] = dict(settings)
            continue
        if settings["source"]["kind"] != "hub":
            raise LayerlawsError(
                f"config models.{key}.revisions: only a hub model has revisions (its source "
                f"kind is {settings['source']['kind']!r})"
            )
        if settings.get("training_tokens") is not None:
            raise LayerlawsError(
                f"config models.{key}.training_tokens: each of its revisions has seen its own "
                f"tokens; leave it out and give each revision its x in a series "
                f"({{model: {key}@<revision>, x: <tokens>}})"
            )
        single = {name: value for name, value in settings.items() if name != "revisions"}
        for revision in revisions:
            models[revision_key(key, revision)] = {
                **single,
                "source": {**settings["source"], "revision": revision},
            }
    for key, training in config.get("training", {}).items():
        if key in config["models"]:
            raise LayerlawsError(
                f"config training.{key}: a training may not share its name with a model"
            )
        tokens_per_step = training["batch_size"] * training["context"]
        for step in checkpoint_steps(training["checkpoints"], training["steps"]):
            models[checkpoint_key(key, step)] = {
                "source": {
                    "kind": "local",
                    "path": checkpoint_path(key, step),
                    "training": key,
                    "step": step,
                    "tokens_seen": step * tokens_per_step,
                },
                "init": "trained",
                "init_seed": 0,
                "trust_remote_code": False,
                "dtype": "float32",
                "gpus": 1,
            }
    return models


def _group(config: Mapping[str, Any], models: Mapping[str, Any], name: str) -> list[str] | None:
    """The models a series entry ``name`` stands for: a model's revisions or a training's
    checkpoints, in order; None when it names neither."""
    settings = config["models"].get(name, {})
    if settings.get("revisions"):
        return [revision_key(name, revision) for revision in settings["revisions"]]
    if name in config.get("training", {}):
        return [key for key, model in models.items() if model["source"].get("training") == name]
    return None


def _derived_x(kind: str, key: str, model: Mapping[str, Any]) -> float | str | None:
    source = model["source"]
    if kind == "label":
        return key
    if kind == "parameters":
        return None
    if "step" in source:
        return source["step"] if kind == "step" else source["tokens_seen"]
    match = STEP_REVISION.match(str(source.get("revision", "")))
    if kind == "step" and match:
        return int(match.group(1))
    if kind == "tokens" and model.get("training_tokens") is not None:
        return model["training_tokens"]
    reason = (
        "neither a training checkpoint nor a revision named step<N>"
        if kind == "step"
        else "not a training checkpoint and has no training_tokens"
    )
    raise LayerlawsError(
        f"no x for model {key!r}: x is {kind!r}, and {key!r} is {reason}; give it in the "
        f"series as {{model: {key}, x: <number>}}"
    )


def series_members(
    config: Mapping[str, Any], models: Mapping[str, Any], name: str
) -> list[SeriesMember]:
    """The members of ``series.<name>`` in order, with their x values."""
    settings = config["series"][name]
    kind = settings["x"]
    members: list[SeriesMember] = []
    for index, entry in enumerate(settings["models"]):
        key, given = (entry, None) if isinstance(entry, str) else (entry["model"], entry.get("x"))
        group = _group(config, models, key)
        if group is None and key not in models:
            raise LayerlawsError(
                f"config series.{name}.models[{index}] names {key!r}, which is neither a model "
                f"nor a training; known models: {sorted(config['models'])}, trainings: "
                f"{sorted(config.get('training', {}))}"
            )
        if group is not None and given is not None:
            raise LayerlawsError(
                f"config series.{name}.models[{index}]: {key!r} stands for several models, so "
                f"it cannot carry one x; list them one by one"
            )
        if given is not None and kind != "label" and isinstance(given, str):
            raise LayerlawsError(
                f"config series.{name}.models[{index}].x is {given!r}; x is {kind!r}, a number"
            )
        for member in group or [key]:
            x = given if given is not None else _derived_x(kind, member, models[member])
            members.append(SeriesMember(member, x))
    return members


@dataclass(frozen=True)
class SeriesRuns:
    """What a config's series add to its runs."""

    equilearning: list[dict[str, str]]
    coupling: list[dict[str, str]]
    signatures: list[dict[str, str]]


def series_runs(config: Mapping[str, Any], models: Mapping[str, Any]) -> SeriesRuns:
    """The runs every series asks for: each member on the series' datasets, its prompts
    and its signature corpus."""
    runs = SeriesRuns([], [], [])
    for name, settings in config.get("series", {}).items():
        for member in series_members(config, models, name):
            for dataset in settings["datasets"]:
                runs.equilearning.append({"model": member.model, "dataset": dataset})
            if settings["prompts"] is not None:
                runs.coupling.append({"model": member.model, "prompts": settings["prompts"]})
            corpus = signature_corpus(config, models, name, member.model)
            if corpus is not None:
                runs.signatures.append({"model": member.model, "dataset": corpus})
    return runs


def signature_corpus(
    config: Mapping[str, Any], models: Mapping[str, Any], name: str, model: str
) -> str | None:
    """The corpus ``series.<name>`` compares ``model``'s embeddings with: its
    ``signatures`` entry, a checkpoint's own training dataset for ``training_corpus``."""
    corpus = config["series"][name]["signatures"]
    if corpus != TRAINING_CORPUS:
        return corpus
    training = models[model]["source"].get("training")
    if training is None:
        raise LayerlawsError(
            f"config series.{name}.signatures is {TRAINING_CORPUS!r}, but {model!r} is not a "
            f"training checkpoint"
        )
    return config["training"][training]["dataset"]


def own_corpus_runs(config: Mapping[str, Any]) -> dict[str, tuple[tuple[str, str], ...]]:
    """Per group of ``signatures.own_corpus``: (model, corpus) of each of its trainings, in
    order: the training's final checkpoint and its own training dataset (Yao & Xu Fig. 5B:
    each model against the corpus it was trained on)."""
    return {
        name: tuple(
            (
                checkpoint_key(training, config["training"][training]["steps"]),
                config["training"][training]["dataset"],
            )
            for training in trainings
        )
        for name, trainings in config["signatures"]["own_corpus"].items()
    }


def tokenizer_owner(models: Mapping[str, Any], config: Mapping[str, Any], model: str) -> str:
    """The model whose tokenizer ``model`` uses: a checkpoint's training tokenizer model,
    else the model itself (whole corpora are tokenised and counted once per tokenizer)."""
    training = models[model]["source"].get("training")
    return model if training is None else config["training"][training]["tokenizer"]


def step_zero_model(models: Mapping[str, Any], model: str) -> str | None:
    """The step-0 checkpoint of a training checkpoint (its initialisation), else None."""
    source = models[model]["source"]
    if "training" not in source:
        return None
    initial = checkpoint_key(source["training"], 0)
    return initial if initial in models else None


def _unique(pairs: list[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """``pairs`` in order, without repeats."""
    return tuple(dict.fromkeys(pairs))


def _runs(config_runs: list[Mapping[str, str]], added: list[dict[str, str]], kind: str):
    return _unique([(run["model"], run[kind]) for run in [*config_runs, *added]])


@dataclass(frozen=True)
class ExpandedConfig:
    """A validated config with its revisions, trainings and series expanded: what every
    stage measures. Built once by ``from_config``, never changed; the config itself is
    left as it was."""

    config: Mapping[str, Any]
    """The validated config as written (read-only view)."""
    models: Mapping[str, Mapping[str, Any]]
    """Every measured model by key: the config's, one per revision (``<key>@<revision>``)
    and one per training checkpoint (``<training>@step<N>``)."""
    runs: tuple[tuple[str, str], ...]
    """(model, dataset) of every equi-learning run, the config's then its series', in
    order without repeats."""
    coupling_runs: tuple[tuple[str, str], ...]
    """(model, prompt set) of every coupling run, likewise."""
    signature_runs: tuple[tuple[str, str], ...]
    """(model, corpus) of every signature run, likewise (a corpus: a dataset or a pool);
    the runs of ``own_corpus`` come last."""
    own_corpus: Mapping[str, tuple[tuple[str, str], ...]]
    """Per group of ``signatures.own_corpus``: (final checkpoint, training dataset) of each
    of its trainings."""
    series: Mapping[str, tuple[SeriesMember, ...]]
    """The members of every series, in order."""
    prompt_sets: Mapping[str, Mapping[str, Any]]
    """Every prompt set by name (``coupling.prompts``)."""
    equilearning_sharding: Sharding
    """How each equi-learning pass is split (``equilearning.shards``)."""
    coupling_sharding: Sharding
    """How each coupling job is split (``coupling.shards``)."""
    hidden_states: Mapping[str, Any]
    """Whether every layer's states are kept, and in which dtype (``hidden_states``)."""

    @classmethod
    def from_config(cls, config: Mapping[str, Any], layout: Layout | None = None) -> ExpandedConfig:
        """Check and expand a validated ``config`` (checkpoints' weights lie where
        ``layout`` puts a training's checkpoints) by every stage's checks, before and after
        expansion (``STAGES``). Raises LayerlawsError on a key that names nothing the
        config defines."""
        layout = layout or Layout()
        for stage in STAGES:
            for check in stage.config_checks:
                check(config)
        models = expand_models(
            config,
            lambda training, step: str(checkpoint_folder(layout.checkpoints(training), step)),
        )
        series = {name: tuple(series_members(config, models, name)) for name in config["series"]}
        added = series_runs(config, models)
        own_corpus = own_corpus_runs(config)
        added.signatures.extend(
            {"model": model, "dataset": corpus}
            for pairs in own_corpus.values()
            for model, corpus in pairs
        )
        expanded = cls(
            config=MappingProxyType(config),
            models=MappingProxyType(
                {key: MappingProxyType(model) for key, model in models.items()}
            ),
            runs=_runs(config["runs"], added.equilearning, "dataset"),
            coupling_runs=_runs(config["coupling"]["runs"], added.coupling, "prompts"),
            signature_runs=_runs(config["signatures"]["runs"], added.signatures, "dataset"),
            own_corpus=MappingProxyType(own_corpus),
            series=MappingProxyType(series),
            prompt_sets=MappingProxyType(config["coupling"]["prompts"]),
            equilearning_sharding=Sharding(config["equilearning"]["shards"]),
            coupling_sharding=Sharding(config["coupling"]["shards"]),
            hidden_states=MappingProxyType(config["hidden_states"]),
        )
        for stage in STAGES:
            for check in stage.expanded_checks:
                check(expanded)
        return expanded

    def prompt_datasets(self) -> list[str]:
        """The datasets the coupling runs' prompt sets draw from, in order (with repeats)."""
        return [
            dataset
            for _, prompts in self.coupling_runs
            for dataset in prompt_datasets(self.prompt_sets[prompts])
        ]

    def tokenizer_owner(self, model: str) -> str:
        """The model whose tokenizer ``model`` uses (see ``tokenizer_owner``)."""
        return tokenizer_owner(self.models, self.config, model)

    def signature_corpus(self, series: str, model: str) -> str | None:
        """The corpus ``series`` compares ``model``'s embeddings with."""
        return signature_corpus(self.config, self.models, series, model)

    def step_zero_model(self, model: str) -> str | None:
        """The step-0 checkpoint of a training checkpoint, else None."""
        return step_zero_model(self.models, model)

    def counted_training(self, model: str, corpus: str) -> str | None:
        """The training whose packed sequences are ``model``'s counts on ``corpus``: the
        model's own training when ``corpus`` is that training's dataset and
        ``signatures.own_corpus_counts`` is ``trained``; else None (the corpus's source is
        counted)."""
        training = self.models[model]["source"].get("training")
        if training is None or self.config["signatures"]["own_corpus_counts"] != "trained":
            return None
        return training if self.config["training"][training]["dataset"] == corpus else None

    def signature_corpora(self, model: str) -> list[str]:
        """The corpora of ``model``'s signature runs, in order."""
        return [corpus for key, corpus in self.signature_runs if key == model]
