"""A pipeline config read for a notebook (``Config``): the stages' settings, the models
loaded as the pipeline prepares and loads them, the datasets' samples and corpora and the
prompt sets, so that the notebook API measures what a ``snakemake --configfile`` run of
the same config measures.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from layerlaws.api.measurements import Texts
from layerlaws.core.atomic import atomic_path
from layerlaws.core.config_errors import problems_message
from layerlaws.core.errors import LayerlawsError
from layerlaws.core.settings import with_defaults
from layerlaws.core.text_files import utf8_text
from layerlaws.coupling.settings import CouplingSettings
from layerlaws.equilearning.settings import EquilearningSettings, observer_specs
from layerlaws.forward.observers import ObserverSpec
from layerlaws.models.facts import read_facts
from layerlaws.models.loading import load_model, load_tokenizer
from layerlaws.models.preparation import prepare_model
from layerlaws.models.quantization import stage_quantization
from layerlaws.pipeline.expansion import ExpandedConfig
from layerlaws.pipeline.startup import config_problems
from layerlaws.pipeline.targets import PREPARATION_EXCLUDED
from layerlaws.rehearsal.counts import divided_counts
from layerlaws.signatures.settings import SignatureSettings
from layerlaws.text.corpus import prompt_datasets, prompt_sources, sample_sentences
from layerlaws.text.sources import iter_texts

EMBEDDED_CONFIG = Path(__file__).parents[2] / "config.yaml"
"""The default config (``make run``'s), in a checkout of the repository."""


def _written(path: Path) -> dict[str, Any]:
    """A config file as written; empty where it cannot be read or parsed (what is wrong
    with it is said by ``config_problems``)."""
    try:
        return yaml.safe_load(utf8_text(path, "config file")) or {}
    except (OSError, LayerlawsError, yaml.YAMLError):
        return {}


@dataclass(frozen=True)
class PromptSet:
    """A coupling prompt set's texts (``coupling.prompts.<name>``: its own texts, then the
    first ``n_from_dataset`` of each dataset's sample) and how each is cut
    (``max_tokens``, ``too_long``), for ``layerlaws.api.coupling``."""

    texts: tuple[str, ...]
    max_tokens: int
    too_long: str


class Config:
    """A config of the pipeline, validated and filled with the schema's defaults as
    Snakemake's run of it is (``load``): each stage's settings (``equilearning``,
    ``signatures``, ``coupling``), its models (``load_model``), its datasets' samples
    (``texts``) and whole corpora (``corpus``), its prompt sets (``prompts``) and
    observers (``observers``)."""

    def __init__(self, expanded: ExpandedConfig) -> None:
        self.expanded = expanded
        """The validated config, expanded: revisions and training checkpoints as models."""
        self.values: Mapping[str, Any] = expanded.config
        """The validated config, the schema's defaults filled in."""
        self.equilearning = EquilearningSettings.from_config(self.values["equilearning"])
        """The equi-learning stage's settings (``equilearning``)."""
        self.signatures = SignatureSettings.from_config(self.values["signatures"])
        """The signature stage's settings (``signatures``)."""
        self.coupling = CouplingSettings.from_config(self.values["coupling"])
        """The coupling stage's settings (``coupling``)."""
        self._samples: dict[str, Any] = {}
        """Each dataset's sample, once drawn."""

    @classmethod
    def load(cls, config: str | Path | Mapping[str, Any] = EMBEDDED_CONFIG) -> Config:
        """A config file (YAML, as given to ``snakemake --configfile``; by default the
        repository's ``config.yaml``, what ``make run`` measures) or a config as a mapping;
        a block alone (``{"coupling": {...}}``) is a config whose other keys are the
        schema's defaults. Raises LayerlawsError with every problem, a line each, as the
        workflow says them."""
        files = [] if isinstance(config, Mapping) else [config]
        written = dict(config) if isinstance(config, Mapping) else _written(Path(config))
        problems = config_problems(files, written)
        if problems:
            raise LayerlawsError(problems_message(problems))
        return cls(ExpandedConfig.from_config(divided_counts(with_defaults(written))))

    def _model(self, model: str) -> Mapping[str, Any]:
        if model not in self.expanded.models:
            raise LayerlawsError(
                f"the config has no model {model!r}; its models: {sorted(self.expanded.models)}"
            )
        return self.expanded.models[model]

    def _dataset(self, dataset: str) -> Mapping[str, Any]:
        datasets = self.values["datasets"]
        if dataset not in datasets:
            raise LayerlawsError(
                f"the config has no dataset {dataset!r}; its datasets: {sorted(datasets)}"
            )
        return datasets[dataset]

    def load_model(
        self,
        model: str,
        device: str = "cpu",
        attention: str | None = None,
        stage: str = "passes",
        folder: str | Path | None = None,
    ) -> tuple[Any, Any]:
        """The config's ``model`` (a key of ``models``, a revision ``<key>@<revision>`` or a
        training checkpoint ``<training>@step<N>``, whose run must have trained it) and its
        tokenizer, prepared from its source as the pipeline prepares it (a GGUF
        dequantised, a hub model read from the Hugging Face cache or fetched, a random
        twin drawn), then loaded on ``device`` in the model's ``dtype`` under its
        ``quantization`` of ``stage`` (``passes`` or ``coupling``); ``attention="eager"``
        for the coupling's Jacobians. It is prepared into ``folder`` and kept there, or
        loaded from it as it is when a model of the same source was prepared there before
        (the pipeline's ``results/models/<model>`` after a run; a random twin's seed is not
        recorded there); by default into a temporary folder, removed once the model is
        loaded (a GGUF's float32 weights are written there)."""
        settings = self._model(model)
        source = settings["source"]
        if "training" in source and not Path(source["path"]).is_dir():
            raise LayerlawsError(
                f"{model} is step {source['step']} of the training {source['training']}, not "
                f"trained here ({source['path']} does not exist): train it with `snakemake "
                f"results/models/{model} --configfile <this config>`, or work in the folder "
                f"whose results/ hold it"
            )
        if folder is not None:
            prepared = self._prepared(model, settings, Path(folder))
            return self._loaded(settings, prepared, device, attention, stage)
        with tempfile.TemporaryDirectory(prefix="layerlaws-model-") as temporary:
            prepared = self._prepared(model, settings, Path(temporary) / "model")
            return self._loaded(settings, prepared, device, attention, stage)

    @staticmethod
    def _prepared(model: str, settings: Mapping[str, Any], folder: Path) -> Path:
        """``folder`` holding ``model`` (its ``settings``) prepared from its source
        (``load_model``)."""
        expected = {**settings["source"], "init": settings.get("init", "trained")}
        if folder.exists():
            recorded = read_facts(folder).source
            if recorded != expected:
                raise LayerlawsError(
                    f"{folder} holds a model prepared from {recorded}, not from {model}'s "
                    f"source {expected}: give another folder, or remove this one"
                )
            return folder
        preparation = {
            key: value for key, value in settings.items() if key not in PREPARATION_EXCLUDED
        }
        with atomic_path(folder) as temporary:
            prepare_model(preparation, temporary)
        return folder

    @staticmethod
    def _loaded(
        settings: Mapping[str, Any], folder: Path, device: str, attention: str | None, stage: str
    ) -> tuple[Any, Any]:
        """The prepared model in ``folder`` and its tokenizer (``load_model``)."""
        model = load_model(
            folder,
            settings.get("dtype", "float32"),
            device,
            attention,
            stage_quantization(settings, stage),
        )
        return model, load_tokenizer(folder)

    def texts(self, dataset: str) -> Texts:
        """The sample the pipeline draws of ``dataset`` (``n_samples`` texts seeded by
        ``sample_seed``, those of its ``exclude`` datasets' samples left out), with the
        dataset's tokenisation settings: what its equi-learning runs read."""
        settings = self._dataset(dataset)
        return Texts(
            tuple(self._sample(dataset)["text"].to_list()),
            settings["max_tokens"],
            settings["min_tokens"],
            settings["too_long"],
            settings["token_budget"],
        )

    def _sample(self, dataset: str) -> Any:
        """The pipeline's sample of ``dataset`` (``sentences.parquet``'s table), drawn once."""
        if dataset not in self._samples:
            settings = self._dataset(dataset)
            self._samples[dataset] = sample_sentences(
                settings["source"],
                settings["n_samples"],
                settings["sample_seed"],
                self._excluded(settings),
            )
        return self._samples[dataset]

    def _excluded(self, dataset: Mapping[str, Any]) -> set[str]:
        """Where every text of the samples of a ``dataset``'s ``exclude`` comes from."""
        return {
            where
            for other in dataset.get("exclude", ())
            for where in self._sample(other)["source"].to_list()
        }

    def corpus(self, name: str) -> Texts:
        """Every text of a dataset's source (those of its ``exclude`` datasets' samples left
        out), or of each dataset of a pool (``signatures.pools``), up to the dataset's
        ``token_budget``: what a signature run counts. The texts are held in memory (the
        pipeline streams them a shard at a time: count a corpus of billions of tokens
        there)."""
        pools = self.values["signatures"]["pools"]
        members = pools.get(name, [name])
        texts = []
        for dataset in members:
            settings = self._dataset(dataset)
            sources = iter_texts(settings["source"], self._excluded(settings))
            texts += [text for text, _ in sources]
        budget = None if name in pools else self._dataset(name)["token_budget"]
        return Texts(tuple(texts), token_budget=budget)

    def prompts(self, name: str) -> PromptSet:
        """The texts of the prompt set ``name`` (``coupling.prompts``) as a coupling run of
        it measures them, with its ``max_tokens`` and ``too_long``."""
        sets = self.expanded.prompt_sets
        if name not in sets:
            raise LayerlawsError(
                f"the config has no prompt set {name!r}; its prompt sets: {sorted(sets)}"
            )
        prompt_set = sets[name]
        samples = [self._sample(dataset) for dataset in prompt_datasets(prompt_set)]
        texts = tuple(text for text, _ in prompt_sources(prompt_set, samples))
        return PromptSet(texts, prompt_set["max_tokens"], prompt_set["too_long"])

    def observers(self, model: str | None = None) -> tuple[ObserverSpec, ...]:
        """The named observers of ``equilearning.observers`` (those that measure ``model``'s
        runs, when given), for ``equilearning_law(..., observers=...)``."""
        return observer_specs(self.values["equilearning"], model)
