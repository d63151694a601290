"""The results folder: every path the workflow reads or writes, built from one root.

Each method takes the keys of what it names (a model, a dataset, a prompt set…) and
defaults them to Snakemake wildcards (``{model}``, ``{dataset}``…), so the same method
gives a rule's output pattern and a concrete path.
"""

from __future__ import annotations

from dataclasses import dataclass

from layerlaws.models.metadata import MODEL_METADATA

MODEL = "{model}"
DATASET = "{dataset}"
PROMPTS = "{prompts}"
TRAINING = "{training}"
SERIES = "{series}"
TASK = "{task}"
SHARD = "{shard}"
OWN_CORPUS = "{own_corpus}"
TOKEN_GROUP = "{group}"
STEP = "{step}"


@dataclass(frozen=True)
class Layout:
    """The folders and files under ``root`` (a path relative to the working directory)."""

    root: str = "results"

    # The training stage.
    def training(self, training: str = TRAINING) -> str:
        """A training's curve, manifest, summary and curve figure."""
        return f"{self.root}/training/{training}"

    def training_counts(self, training: str = TRAINING) -> str:
        """The token shards and unigram and bigram counts of the sequences a training
        read (its checkpoints' signatures on their own corpus)."""
        return f"{self.training(training)}/counts"

    def checkpoints(self, training: str = TRAINING) -> str:
        """Where a training writes its checkpoints (not declared as outputs: a resumed
        training finds them there)."""
        return f"{self.training(training)}/checkpoints"

    def checkpoint_manifest(self, training: str = TRAINING) -> str:
        """The table of a training's checkpoints (it exists once they all do)."""
        return f"{self.training(training)}/checkpoints.csv"

    def step_record(self, training: str = TRAINING, step: str = STEP) -> str:
        """The record a training's segment writes once the training reached ``step`` (a
        checkpoint's exists once its weights do)."""
        return f"{self.training(training)}/reached/step{step}.json"

    # The corpus, models and tokens stages.
    def sentences(self, dataset: str = DATASET) -> str:
        """A dataset's sampled texts."""
        return f"{self.root}/corpus/{dataset}/sentences.parquet"

    def model(self, model: str = MODEL) -> str:
        """A prepared model's folder."""
        return f"{self.root}/models/{model}"

    def model_download(self, model: str = MODEL) -> str:
        """The record of a hub model's download into the Hugging Face cache (its snapshot
        and commit), which its preparation reads."""
        return f"{self.root}/downloads/{model}.json"

    def model_facts(self, model: str = MODEL) -> str:
        """A prepared model's facts file."""
        return f"{self.model(model)}/{MODEL_METADATA}"

    def tokens(self, model: str = MODEL, dataset: str = DATASET) -> str:
        """A dataset's sample tokenised by a model's tokenizer."""
        return f"{self.root}/tokens/{model}/{dataset}.parquet"

    def hidden(self, model: str = MODEL, dataset: str = DATASET) -> str:
        """A run's kept hidden states (``hidden_states.keep``)."""
        return f"{self.root}/hidden/{model}/{dataset}"

    # The equilearning stage.
    def equilearning(self, model: str = MODEL, dataset: str = DATASET) -> str:
        """A run's PR table, law fits, token views and figures."""
        return f"{self.root}/equilearning/{model}/{dataset}"

    def equilearning_shards(self, model: str = MODEL, dataset: str = DATASET) -> str:
        """The shards' observers of a pass (``equilearning.shards``)."""
        return f"{self.equilearning(model, dataset)}/shards"

    def equilearning_shard(
        self, model: str = MODEL, dataset: str = DATASET, shard: str = SHARD
    ) -> str:
        """What one shard's observers merged."""
        return f"{self.equilearning_shards(model, dataset)}/{shard}.pt"

    def equilearning_observers(self, model: str = MODEL, dataset: str = DATASET) -> str:
        """The named observers' tables of a run, ``<name>.csv`` (``equilearning.observers``)."""
        return f"{self.equilearning(model, dataset)}/observers"

    def evaluation(self, model: str = MODEL, dataset: str = DATASET) -> str:
        """A run's evaluation table (loss and accuracy of the probing task)."""
        return f"{self.root}/evaluation/{model}/{dataset}.csv"

    def equilearning_summary(self) -> str:
        """The cross-run summary tables and figure."""
        return f"{self.root}/equilearning"

    # The signatures stage.
    def signatures(self, model: str = MODEL, dataset: str = DATASET) -> str:
        """A model's counts and signatures on a corpus (a dataset or a pool)."""
        return f"{self.root}/signatures/{model}/{dataset}"

    def corpus_comparison(self, model: str = MODEL) -> str:
        """A model's signatures compared across its corpora."""
        return f"{self.root}/signatures/{model}"

    def token_group(
        self, model: str = MODEL, dataset: str = DATASET, group: str = TOKEN_GROUP
    ) -> str:
        """A chosen group of tokens in one signature run (``signatures.token_groups``)."""
        return f"{self.signatures(model, dataset)}/token_groups/{group}"

    def own_corpus(self, name: str = OWN_CORPUS) -> str:
        """A group of trained models, each compared with its own training corpus."""
        return f"{self.root}/signatures/own_corpus/{name}"

    # The coupling stage.
    def coupling(self, model: str = MODEL, prompts: str = PROMPTS) -> str:
        """A model's block coupling on a prompt set, and its figures."""
        return f"{self.root}/coupling/{model}/{prompts}"

    def coupling_shards(self, model: str = MODEL, prompts: str = PROMPTS) -> str:
        """The shards' measurements of a coupling job (``coupling.shards``)."""
        return f"{self.coupling(model, prompts)}/shards"

    def coupling_shard(self, model: str = MODEL, prompts: str = PROMPTS, shard: str = SHARD) -> str:
        """One shard's measurements."""
        return f"{self.coupling_shards(model, prompts)}/{shard}.pt"

    def trajectories(self, model: str = MODEL, prompts: str = PROMPTS) -> str:
        """A model's hidden trajectories on a prompt set, and their figures."""
        return f"{self.coupling(model, prompts)}/trajectories"

    # The series stage.
    def series(self, series: str = SERIES) -> str:
        """A series' summary, fits and figures."""
        return f"{self.root}/series/{series}"

    # The synthetic stage.
    def synthetic(self) -> str:
        """The synthetic stage's summary and figures."""
        return f"{self.root}/synthetic"

    def synthetic_task(self, task: str = TASK) -> str:
        """An addition task's data and signatures."""
        return f"{self.synthetic()}/{task}"

    def synthetic_model(self, task: str = TASK, model: str = MODEL) -> str:
        """An embedding model trained on an addition task."""
        return f"{self.synthetic_task(task)}/{model}"

    # Logs.
    def log(self, rule: str, *keys: str) -> str:
        """The log of a job of ``rule``, named by its ``keys`` (wildcard patterns)."""
        return "/".join((f"{self.root}/logs/{rule}", *keys)) + ".log"

    def folders(self) -> dict[str, str]:
        """Every folder method's pattern (wildcards unfilled), by method name."""
        return {
            name: getattr(self, name)()
            for name in (
                "training",
                "training_counts",
                "checkpoints",
                "model",
                "hidden",
                "equilearning",
                "equilearning_shards",
                "equilearning_observers",
                "equilearning_summary",
                "signatures",
                "corpus_comparison",
                "token_group",
                "own_corpus",
                "coupling",
                "coupling_shards",
                "trajectories",
                "series",
                "synthetic",
                "synthetic_task",
                "synthetic_model",
            )
        }

    def files(self) -> dict[str, str]:
        """Every file method's pattern (wildcards unfilled), by method name."""
        return {
            name: getattr(self, name)()
            for name in (
                "checkpoint_manifest",
                "step_record",
                "sentences",
                "model_download",
                "model_facts",
                "tokens",
                "evaluation",
            )
        }
