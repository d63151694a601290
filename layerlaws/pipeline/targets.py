"""What the workflow builds for an expanded config, and what its jobs read: the targets of
``rule all`` (every stage's final outputs, ``layerlaws.pipeline.stages``), the rules'
input lists, and the settings rules pass as params.

Settings that change results reach jobs as rule params (so changing one reruns exactly
the jobs that use it); the functions below that return settings give those params.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from layerlaws.equilearning.workflow import measures_geometry
from layerlaws.models.hub_files import read_hub_files
from layerlaws.pipeline.expansion import ExpandedConfig
from layerlaws.pipeline.layout import Layout
from layerlaws.pipeline.preflight import prepared_models
from layerlaws.pipeline.stages import STAGES
from layerlaws.text.corpus import prompt_datasets
from layerlaws.training.plan import TrainingSpec, previous_segment_end, segment_ends

PREPARATION_EXCLUDED = ("dtype", "quantization", "gpus", "size", "scores", "training_tokens")
"""Model settings that do not change a prepared model: the forward passes' precision and
quantisation (applied by later stages), what only plans jobs, external scores and facts."""


def plot_options(config: Mapping[str, Any], stage: str | None = None) -> dict[str, Any]:
    """The plot options of a figure rule: those of every figure (format, dpi, width) and
    those of its ``stage`` (the block plots.<stage>), so a stage's option reruns only its
    figures."""
    plots = config["plots"]
    common = {key: value for key, value in plots.items() if not isinstance(value, dict)}
    return common | copy.deepcopy(plots.get(stage, {}))


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
        """Every target of the workflow: the final outputs of every stage (``STAGES``)."""
        return [
            path
            for stage in STAGES
            for path in stage.outputs(self.layout, self.expanded, self.plot_format)
        ]

    def synthetic_pairs(self) -> list[tuple[str, str]]:
        """Every (task, model) of the synthetic stage, in config order."""
        synthetic = self.config["synthetic"]
        return [(task, model) for task in synthetic["tasks"] for model in synthetic["models"]]

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
        prompt_set = self.expanded.prompt_sets[prompts]
        return [self.layout.sentences(dataset) for dataset in prompt_datasets(prompt_set)]

    def excluded_sentences(self, dataset: str) -> list[str]:
        """The samples of the datasets a dataset leaves out (``exclude``)."""
        return [self.layout.sentences(name) for name in self.config["datasets"][dataset]["exclude"]]

    def training_corpus(self, training: str) -> list[str]:
        """What a training's corpus is packed from besides the tokenizer: its dataset's
        sample (``corpus: sample``), or the samples its dataset's whole source leaves out
        (``corpus: source``: the source itself is streamed)."""
        settings = self.config["training"][training]
        if settings["corpus"] == "sample":
            return [self.layout.sentences(settings["dataset"])]
        return self.excluded_sentences(settings["dataset"])

    def training_source(self, training: str) -> dict[str, Any] | None:
        """The source a ``corpus: source`` training streams (its dataset's); None for a
        training on its dataset's sample."""
        settings = self.config["training"][training]
        if settings["corpus"] == "sample":
            return None
        return dict(self.config["datasets"][settings["dataset"]]["source"])

    def training_tokenizer(self, training: str) -> str:
        """The prepared model whose tokenizer a training uses."""
        return self.layout.model(self.config["training"][training]["tokenizer"])

    def held_out_sentences(self, training: str) -> list[str]:
        held_out = self.config["training"][training]["held_out"]
        return [] if held_out is None else [self.layout.sentences(held_out)]

    def model_download(self, model: str) -> list[str]:
        """The record of a hub model's download, which its preparation reads (none for a
        model from another source)."""
        hub = self.expanded.models[model]["source"]["kind"] == "hub"
        return [self.layout.model_download(model)] if hub else []

    def download_settings(self, model: str) -> dict[str, Any]:
        """What a hub model's download depends on: its source, ``trust_remote_code``, the
        source of its ``tokenizer`` (fetched with it) and, under the config's ``hub_files``,
        the files recorded for its repository (``path`` of the data file, ``files``)."""
        settings = self.expanded.models[model]
        found = {
            "source": copy.deepcopy(settings["source"]),
            "trust_remote_code": settings.get("trust_remote_code", False),
            "tokenizer": copy.deepcopy(settings.get("tokenizer")),
        }
        if self.config.get("hub_files"):
            record = read_hub_files(self.config["hub_files"])
            found["hub_files"] = {
                "path": record.path,
                "files": asdict(record.files(settings["source"])),
            }
        return found

    def _hub_dataset(self, dataset: str) -> bool:
        return self.config["datasets"][dataset]["source"]["kind"] == "hub"

    def _counted_corpora(self) -> list[tuple[str, str]]:
        """(tokenizer owner, dataset) of every corpus whose whole source is tokenised for
        the signatures (``tokenize_corpus``): each dataset of a signature run not counted
        from a training's sequences, and every member of a pool."""
        pools = self.config["signatures"]["pools"]
        found = []
        for model, corpus in self.expanded.signature_runs:
            if corpus in pools:
                members = pools[corpus]
            else:
                members = [] if self.expanded.counted_training(model, corpus) else [corpus]
            found += [(self.expanded.tokenizer_owner(model), member) for member in members]
        return list(dict.fromkeys(found))

    def _read_samples(self) -> list[str]:
        """The datasets whose samples the workflow's jobs read: those of the equi-learning
        runs, of the coupling runs' prompt sets, the trainings' datasets and held-out sets,
        and what they and the corpora counted for the signatures leave out, and theirs."""
        config, datasets = self.config, self.config["datasets"]
        names = [dataset for _, dataset in self.expanded.runs]
        names += self.expanded.prompt_datasets()
        for training in config["training"].values():
            names.append(training["held_out"])
            dataset = training["dataset"]
            names += [dataset] if training["corpus"] == "sample" else datasets[dataset]["exclude"]
        for _, corpus in self._counted_corpora():
            names += datasets[corpus]["exclude"]
        found = [name for name in dict.fromkeys(names) if name in datasets]
        for name in found:  # found grows as it is read: what each leaves out, then theirs
            found += [other for other in datasets[name]["exclude"] if other not in found]
        return found

    def hub_reads(self) -> list[str]:
        """What ``snakemake download`` makes where the network is: every output whose job
        reads the Hugging Face hub. The download records of the hub models the workflow
        prepares, the samples of the hub datasets its jobs read, the token shards of the
        hub corpora counted for the signatures (each a whole corpus, read by its
        ``tokenize_corpus`` job) and the packed sequences of the trainings on a hub
        dataset's whole source (``corpus: source``, streamed by ``pack_training_corpus``)."""
        models = [self.model_download(model) for model in prepared_models(self.expanded)]
        return [
            *(path for paths in models for path in paths),
            *(
                self.layout.sentences(name)
                for name in self._read_samples()
                if self._hub_dataset(name)
            ),
            *(
                f"{self.layout.signatures(owner, corpus)}/shards"
                for owner, corpus in self._counted_corpora()
                if self._hub_dataset(corpus)
            ),
            *(
                f"{self.layout.training(key)}/sequences.npy"
                for key, training in self.config["training"].items()
                if training["corpus"] == "source" and self._hub_dataset(training["dataset"])
            ),
        ]

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
        j-th dataset), ``geometry_i_j`` (that run's observers' folder) where it measures
        geometry, and ``depth_i``, ``trajectories_i``, ``rcos_i`` when measured."""
        inputs = {}
        for member in self.series_summary_members(series):
            for name, value in member.items():
                if name in ("facts", "depth", "trajectories", "rcos") and value is not None:
                    inputs[value] = self._series_path(series, member["model"], name)
                elif name in ("law", "evaluation", "geometry"):
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
            case "geometry":
                return self.layout.equilearning_observers(model, dataset)
            case "depth":
                return f"{self.layout.coupling(model, prompts)}/depth.csv"
            case "trajectories":
                return f"{self.layout.trajectories(model, prompts)}/tokens.csv"
        corpus = self.expanded.signature_corpus(series, model)
        return f"{self.layout.signatures(model, corpus)}/rcos.csv"

    def series_summary_members(self, series: str) -> list[dict[str, Any]]:
        """Per member of a series: its model, x, scores and training tokens (None when not
        given), and the input names of what was measured on it (None: not measured), as
        ``series_inputs`` names them; ``geometry`` only for a member that measures it."""
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
                    "training_tokens": self.expanded.models[model].get("training_tokens"),
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
            # Only where measured, so that the other series' params stay as they were.
            if measures_geometry(self.config, model):
                members[-1]["geometry"] = {
                    d: f"geometry_{index}_{j}" for j, d in enumerate(settings["datasets"])
                }
        return members


def alternatives(names: Iterable[str]) -> str:
    """A regex matching exactly one of ``names`` (and nothing when there are none)."""
    return "|".join(re.escape(name) for name in sorted(names)) or "(?!)"
