"""What the workflow builds for an expanded config, and what its jobs read: the target
lists of ``rule all``, the rules' input lists, and the settings rules pass as params.

Settings that change results reach jobs as rule params (so changing one reruns exactly
the jobs that use it); the functions below that return settings give those params.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from layerlaws.pipeline.expansion import ExpandedConfig
from layerlaws.pipeline.layout import Layout
from layerlaws.text.corpus import prompt_datasets
from layerlaws.training.plan import TrainingSpec, previous_segment_end, segment_ends

EQUILEARNING_FIGURES = ("law", "norms", "fuzziness", "token_views")
SIGNATURE_FIGURES = ("heatmaps", "deciles", "per_token", "digits")
OWN_CORPUS_FIGURES = ("rcos_by_dataset", "per_token_by_dataset", "pooled_deciles")
"""Figures of a ``signatures.own_corpus`` group (Yao & Xu Fig. 5B, 5C, 5E)."""
COUPLING_FIGURES = (
    "depth",
    "tokens",
    "adjacency",
    "singular_values",
    "depth_grid",
    "token_grid",
    "adjacency_graph",
)
TRAJECTORY_FIGURES = ("shape", "pca", "layers")
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
SERIES_FIGURES = ("quantities", "generalisation", "members", "fits")
SYNTHETIC_DATA_KEYS = (
    "anchors",
    "keys",
    "n_samples",
    "test_fraction",
    "data_seed",
    "signature_inputs",
)
SYNTHETIC_TRAINING_KEYS = (
    "anchors",
    "keys",
    "hidden_size",
    "init_exponent",
    "learning_rate",
    "weight_decay",
    "batch_size",
    "epochs",
    "records",
    "seeds",
    "snapshot_epoch",
)
SYNTHETIC_PLOT_KEYS = ("shown_labels",)
PREPARATION_EXCLUDED = ("dtype", "quantization", "gpus", "size", "scores")
"""Model settings that do not change a prepared model: the forward passes' precision and
quantisation (applied by later stages), what only plans jobs, external scores."""


def plot_options(config: Mapping[str, Any], stage: str | None = None) -> dict[str, Any]:
    """The plot options of a figure rule: those of every figure (format, dpi, width) and
    those of its ``stage`` (the block plots.<stage>), so a stage's option reruns only its
    figures."""
    plots = config["plots"]
    common = {key: value for key, value in plots.items() if not isinstance(value, dict)}
    return common | copy.deepcopy(plots.get(stage, {}))


def _synthetic_keys(config: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    return {key: copy.deepcopy(config["synthetic"][key]) for key in keys}


def synthetic_data_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """What an addition task's data depend on (its kind is the wildcard)."""
    return _synthetic_keys(config, SYNTHETIC_DATA_KEYS)


def synthetic_training_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """What a trained addition model depends on besides its data."""
    return _synthetic_keys(config, SYNTHETIC_TRAINING_KEYS)


def synthetic_plot_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """What the synthetic figures show beyond the stage's results."""
    return _synthetic_keys(config, SYNTHETIC_PLOT_KEYS)


def series_norm(config: Mapping[str, Any]) -> str:
    """The norm of the series' law columns: the paper's (``model``) when it is measured."""
    norms = config["equilearning"]["norms"]
    return "model" if "model" in norms else norms[0]


@dataclass(frozen=True)
class Targets:
    """The files of an expanded config under a layout, with figures in ``plot_format``."""

    expanded: ExpandedConfig
    layout: Layout
    plot_format: str

    @property
    def config(self) -> Mapping[str, Any]:
        return self.expanded.config

    # What rule all asks for.

    def final_outputs(self) -> list[str]:
        """Every target of the workflow."""
        return (
            self.equilearning_outputs()
            + self.signature_outputs()
            + self.coupling_outputs()
            + self.training_outputs()
            + self.series_outputs()
            + self.synthetic_outputs()
        )

    def equilearning_outputs(self) -> list[str]:
        if not self.expanded.runs:
            return []
        summary = self.layout.equilearning_summary()
        outputs = [
            f"{summary}/summary.csv",
            f"{summary}/best_datasets.csv",
            f"{summary}/summary.{self.plot_format}",
        ]
        for model, dataset in self.expanded.runs:
            folder = self.layout.equilearning(model, dataset)
            outputs.append(f"{folder}/law.csv")
            outputs += [f"{folder}/{name}.{self.plot_format}" for name in EQUILEARNING_FIGURES]
            if self.config["hidden_states"]["keep"]:
                outputs.append(self.layout.hidden(model, dataset))
        return outputs

    def signature_outputs(self) -> list[str]:
        outputs = []
        for model, corpus in self.expanded.signature_runs:
            folder = self.layout.signatures(model, corpus)
            outputs += [f"{folder}/rcos.csv", f"{folder}/percentiles.csv"]
            outputs += [f"{folder}/{name}.{self.plot_format}" for name in SIGNATURE_FIGURES]
        for model in dict.fromkeys(model for model, _ in self.expanded.signature_runs):
            folder = self.layout.corpus_comparison(model)
            outputs += [
                f"{folder}/rcos_by_corpus.csv",
                f"{folder}/rcos_by_corpus.{self.plot_format}",
                f"{folder}/per_token_by_corpus.{self.plot_format}",
            ]
        for name in self.expanded.own_corpus:
            folder = self.layout.own_corpus(name)
            outputs += [f"{folder}/rcos_by_dataset.csv", f"{folder}/pooled_deciles.csv"]
            outputs += [f"{folder}/{figure}.{self.plot_format}" for figure in OWN_CORPUS_FIGURES]
        return outputs

    def coupling_outputs(self) -> list[str]:
        outputs = []
        for model, prompts in self.expanded.coupling_runs:
            coupling = self.layout.coupling(model, prompts)
            trajectories = self.layout.trajectories(model, prompts)
            outputs += [f"{coupling}/{name}.{self.plot_format}" for name in COUPLING_FIGURES]
            outputs += [f"{trajectories}/{name}.{self.plot_format}" for name in TRAJECTORY_FIGURES]
        return outputs

    def training_outputs(self) -> list[str]:
        return [
            path
            for training in self.config["training"]
            for path in (
                f"{self.layout.training(training)}/curve.{self.plot_format}",
                self.layout.checkpoint_manifest(training),
            )
        ]

    def series_outputs(self) -> list[str]:
        names = ("summary.csv", "fits.csv", *(f"{n}.{self.plot_format}" for n in SERIES_FIGURES))
        return [
            f"{self.layout.series(series)}/{name}"
            for series in self.config["series"]
            for name in names
        ]

    def synthetic_pairs(self) -> list[tuple[str, str]]:
        """Every (task, model) of the synthetic stage, in config order."""
        synthetic = self.config["synthetic"]
        return [(task, model) for task in synthetic["tasks"] for model in synthetic["models"]]

    def synthetic_outputs(self) -> list[str]:
        tasks = self.config["synthetic"]["tasks"]
        if not tasks:
            return []
        folder = self.layout.synthetic()
        return [
            f"{folder}/summary.csv",
            *[f"{self.layout.synthetic_task(task)}/signatures.csv" for task in tasks],
            *[f"{folder}/{name}.{self.plot_format}" for name in SYNTHETIC_FIGURES],
        ]

    # Inputs of the rules.

    def synthetic_inputs(self) -> dict[str, list[str]]:
        """The tables and arrays the synthetic summary and figures read."""
        pairs = self.synthetic_pairs()
        return {
            "records": [f"{self.layout.synthetic_model(t, m)}/r_order.csv" for t, m in pairs],
            "weights": [f"{self.layout.synthetic_model(t, m)}/weights.npz" for t, m in pairs],
            "signatures": [
                f"{self.layout.synthetic_task(task)}/signatures.npz"
                for task in self.config["synthetic"]["tasks"]
            ],
        }

    def run_files(self, name: str) -> list[str]:
        """File ``name`` of every equi-learning run's folder, in run order."""
        return [f"{self.layout.equilearning(m, d)}/{name}" for m, d in self.expanded.runs]

    def pool_members(self, model: str, pool: str, kind: str) -> list[str]:
        """The ``kind`` counts (unigrams, bigrams) of every dataset of a pool."""
        return [
            f"{self.layout.signatures(model, member)}/{kind}.parquet"
            for member in self.config["signatures"]["pools"][pool]
        ]

    def counts(self, model: str, corpus: str, kind: str) -> str:
        """A corpus's ``kind`` counts for ``model``'s tokenizer (shared by the checkpoints
        of a training), or those of the sequences its training read
        (``ExpandedConfig.counted_training``)."""
        training = self.expanded.counted_training(model, corpus)
        if training is not None:
            return f"{self.layout.training_counts(training)}/{kind}.parquet"
        owner = self.expanded.tokenizer_owner(model)
        return f"{self.layout.signatures(owner, corpus)}/{kind}.parquet"

    def corpus_files(self, model: str, name: str) -> list[str]:
        """File ``name`` of each of ``model``'s signature corpora."""
        return [
            f"{self.layout.signatures(model, corpus)}/{name}"
            for corpus in self.expanded.signature_corpora(model)
        ]

    def own_corpus_files(self, name: str, file: str) -> list[str]:
        """File ``file`` of each signature run of the ``signatures.own_corpus`` group
        ``name`` (each model on its own training dataset), in order."""
        return [
            f"{self.layout.signatures(model, corpus)}/{file}"
            for model, corpus in self.expanded.own_corpus[name]
        ]

    def prompt_sentences(self, prompts: str) -> list[str]:
        """The sampled texts a prompt set draws from, if any."""
        prompt_set = self.config["coupling"]["prompts"][prompts]
        return [self.layout.sentences(dataset) for dataset in prompt_datasets(prompt_set)]

    def excluded_sentences(self, dataset: str) -> list[str]:
        """The samples of the datasets a dataset leaves out (``exclude``)."""
        return [self.layout.sentences(name) for name in self.config["datasets"][dataset]["exclude"]]

    def held_out_sentences(self, training: str) -> list[str]:
        held_out = self.config["training"][training]["held_out"]
        return [] if held_out is None else [self.layout.sentences(held_out)]

    def trained_weights(self, model: str) -> list[str]:
        """A training checkpoint's weights exist once its training reached its step (the
        record of that step's segment), while the training goes on."""
        source = self.expanded.models[model]["source"]
        if "training" not in source:
            return []
        return [self.layout.step_record(source["training"], source["step"])]

    def step_records(self, training: str) -> list[str]:
        """The records of every segment of a training, in step order."""
        spec = TrainingSpec.of(self.config["training"][training])
        return [self.layout.step_record(training, end) for end in segment_ends(spec)]

    def previous_step_record(self, training: str, step: int) -> list[str]:
        """The record of the segment before the one that ends at ``step`` (none for the
        first): the checkpoint it goes on from."""
        spec = TrainingSpec.of(self.config["training"][training])
        previous = previous_segment_end(spec, step)
        return [] if previous is None else [self.layout.step_record(training, previous)]

    def initial_model(self, model: str) -> list[str]:
        """The prepared step-0 checkpoint of a training checkpoint: the weights its
        coupling is compared with (other models are compared with a randomly initialised
        twin)."""
        initial = self.expanded.step_zero_model(model)
        return [] if initial is None else [self.layout.model(initial)]

    def model_preparation(self, model: str) -> dict[str, Any]:
        """What preparing a model depends on: its settings but PREPARATION_EXCLUDED."""
        return {
            key: copy.deepcopy(value)
            for key, value in self.expanded.models[model].items()
            if key not in PREPARATION_EXCLUDED
        }

    def series_inputs(self, series: str) -> dict[str, str]:
        """Every file a series' summary reads, by input name: per member i ``facts_i``
        (its prepared model), ``law_i_j`` and ``evaluation_i_j`` (its run on the series'
        j-th dataset), and ``depth_i``, ``trajectories_i``, ``rcos_i`` when measured."""
        inputs = {}
        for member in self.series_summary_members(series):
            for name, value in member.items():
                if name in ("facts", "depth", "trajectories", "rcos") and value is not None:
                    inputs[value] = self._series_path(series, member["model"], name)
                elif name in ("law", "evaluation"):
                    for dataset, input_name in value.items():
                        inputs[input_name] = self._series_path(
                            series, member["model"], name, dataset
                        )
        return inputs

    def _series_path(self, series: str, model: str, name: str, dataset: str = "") -> str:
        prompts = self.config["series"][series]["prompts"]
        match name:
            case "facts":
                return self.layout.model(model)
            case "law":
                return f"{self.layout.equilearning(model, dataset)}/law.csv"
            case "evaluation":
                return self.layout.evaluation(model, dataset)
            case "depth":
                return f"{self.layout.coupling(model, prompts)}/depth.csv"
            case "trajectories":
                return f"{self.layout.trajectories(model, prompts)}/tokens.csv"
        corpus = self.expanded.signature_corpus(series, model)
        return f"{self.layout.signatures(model, corpus)}/rcos.csv"

    def series_summary_members(self, series: str) -> list[dict[str, Any]]:
        """Per member of a series: its model, x and scores, and the input names of what
        was measured on it (None: not measured), as ``series_inputs`` names them."""
        settings = self.config["series"][series]
        members = []
        for index, member in enumerate(self.expanded.series[series]):
            model, measured = member.model, settings["prompts"] is not None
            corpus = self.expanded.signature_corpus(series, model)
            members.append(
                {
                    "model": member.model,
                    "x": member.x,
                    "scores": copy.deepcopy(self.expanded.models[model].get("scores", {})),
                    "probe": self.expanded.models[model].get("probe", "auto"),
                    "facts": f"facts_{index}",
                    "law": {d: f"law_{index}_{j}" for j, d in enumerate(settings["datasets"])},
                    "evaluation": {
                        d: f"evaluation_{index}_{j}" for j, d in enumerate(settings["datasets"])
                    },
                    "depth": f"depth_{index}" if measured else None,
                    "trajectories": f"trajectories_{index}" if measured else None,
                    "rcos": None if corpus is None else f"rcos_{index}",
                }
            )
        return members


def alternatives(names: Iterable[str]) -> str:
    """A regex matching exactly one of ``names`` (and nothing when there are none)."""
    return "|".join(re.escape(name) for name in sorted(names)) or "(?!)"
