# Helpers shared by all stages: config validation, cross-checks, output lists, and the
# two ways settings reach a job. Nothing else reads the raw YAML.
#
# - Settings that change results are rule params, so changing one reruns exactly the jobs
#   that use it (and what follows).
# - Execution settings (the config's `execution` block) change how a job runs, never what
#   it computes: they are never params. Rules read them through EXECUTION (for resources),
#   scripts through layerlaws.pipeline.execution.Execution.from_config(snakemake.config).
import re

import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from layerlaws.synthetic.tasks import TASKS as ADDITION_TASKS
from layerlaws.text.corpus import prompt_datasets
from layerlaws.core.errors import LayerlawsError
from layerlaws.pipeline.execution import Execution
from layerlaws.pipeline.planning import JobPlanner
from layerlaws.pipeline.renamed_keys import renamed_key_errors
from layerlaws.pipeline.expansion import (
    expand_models,
    initial_weights,
    series_members,
    series_runs,
    signature_corpus,
    tokenizer_owner,
)
from layerlaws.training.plan import checkpoint_folder as step_folder

SCHEMA = workflow.source_path("../schemas/config.schema.yaml")

if renamed_key_errors(config):
    raise WorkflowError("\n".join(renamed_key_errors(config)))
validate(config, SCHEMA)

with open(SCHEMA) as schema_file:
    KEY_PATTERN = yaml.safe_load(schema_file)["$defs"]["key"]["pattern"].strip("^$")
# A model key, or one expanded from a revision or a training checkpoint: <key>@<name>.
MODEL_PATTERN = f"{KEY_PATTERN}(@{KEY_PATTERN})?"
EXECUTION = Execution.from_config(config)
PLOT_FORMAT = config["plots"]["format"]


def checkpoint_folder(training):
    """Where a training writes its checkpoints (not declared as outputs: a resumed
    training finds them there)."""
    return f"results/training/{training}/checkpoints"


def unique(runs):
    return [dict(pair) for pair in dict.fromkeys(tuple(run.items()) for run in runs)]


def check_trainings():
    """Each training names a model (its tokenizer) and datasets."""
    for key, training in config["training"].items():
        for field, table in (
            ("tokenizer", "models"),
            ("dataset", "datasets"),
            ("held_out", "datasets"),
        ):
            name = training[field]
            if name is not None and name not in config[table]:
                raise WorkflowError(
                    f"config training.{key}.{field} is {name!r}, which is not a key of "
                    f"{table}; known {table}: {sorted(config[table])}"
                )


def check_series():
    """Each series names known datasets, prompts and corpora."""
    corpora = {*config["datasets"], *config["signatures"]["pools"], "training_corpus"}
    for name, series in config["series"].items():
        for field, known in (
            ("datasets", config["datasets"]),
            ("prompts", config["coupling"]["prompts"]),
            ("signatures", corpora),
        ):
            values = series[field] if field == "datasets" else [series[field]]
            for value in values:
                if value is not None and value not in known:
                    raise WorkflowError(
                        f"config series.{name}.{field} names {value!r}; known: {sorted(known)}"
                    )


check_trainings()
check_series()
# Revisions and training checkpoints become models, series become runs: every stage sees
# one model per measured set of weights.
try:
    MODELS = expand_models(
        config,
        lambda training, step: str(step_folder(checkpoint_folder(training), step)),
    )
    SERIES = {name: series_members(config, MODELS, name) for name in config["series"]}
    SERIES_RUNS = series_runs(config, MODELS)
except LayerlawsError as error:
    raise WorkflowError(f"{error}") from None
config["models"] = MODELS
config["runs"] = unique(config["runs"] + SERIES_RUNS.equilearning)
config["coupling"]["runs"] = unique(config["coupling"]["runs"] + SERIES_RUNS.coupling)
config["signatures"]["runs"] = unique(
    config["signatures"]["runs"] + SERIES_RUNS.signatures
)
PLANNER = JobPlanner(config)


def needs(job):
    """The resource functions of the model-running rules, from a JobPlanner method
    ``job``: GPUs, host memory, disk and runtime from the prepared model's size and the
    run's tokens, evaluated when the job's inputs exist."""

    def need(name):
        return lambda wildcards, input: getattr(job(wildcards, input), name)

    return {name: need(name) for name in ("gpu", "mem_mb", "disk_mb", "runtime")}


def plot_options(stage=None):
    """The plot options of a figure rule: those of every figure (format, dpi, width) and
    those of its ``stage`` (the block plots.<stage>), so a stage's option reruns only its
    figures."""
    common = {
        key: value
        for key, value in config["plots"].items()
        if not isinstance(value, dict)
    }
    return common | config["plots"].get(stage, {})


def model_dtype(wildcards):
    """The precision of a model's forward passes."""
    return config["models"][wildcards.model]["dtype"]


def model_probe(wildcards):
    """A model's probing task as configured (auto, next_token or masked_lm)."""
    return config["models"][wildcards.model].get("probe", "auto")


def check_runs():
    """Every run names a configured model (after expansion) and dataset."""
    for index, run in enumerate(config["runs"]):
        for kind, table in (("model", "models"), ("dataset", "datasets")):
            if run[kind] not in config[table]:
                raise WorkflowError(
                    f"config runs[{index}].{kind} is {run[kind]!r}, which is not a key of "
                    f"{table}; known {table}: {sorted(config[table])}"
                )


check_runs()


def check_signatures():
    """Pools name datasets, pool names differ from dataset keys, runs name known keys."""
    signatures = config["signatures"]
    for pool, members in signatures["pools"].items():
        if pool in config["datasets"]:
            raise WorkflowError(
                f"config signatures.pools.{pool}: a pool may not share its name with a "
                f"dataset; rename it"
            )
        for member in members:
            if member not in config["datasets"]:
                raise WorkflowError(
                    f"config signatures.pools.{pool} names {member!r}, which is not a key "
                    f"of datasets; known datasets: {sorted(config['datasets'])}"
                )
    corpora = sorted([*config["datasets"], *signatures["pools"]])
    for index, run in enumerate(signatures["runs"]):
        if run["model"] not in config["models"]:
            raise WorkflowError(
                f"config signatures.runs[{index}].model is {run['model']!r}, which is not a "
                f"key of models; known models: {sorted(config['models'])}"
            )
        if run["dataset"] not in corpora:
            raise WorkflowError(
                f"config signatures.runs[{index}].dataset is {run['dataset']!r}, which is "
                f"neither a dataset nor a pool; known: {corpora}"
            )


check_signatures()


def alternatives(names):
    """A regex matching exactly one of ``names`` (and nothing when there are none)."""
    return "|".join(re.escape(name) for name in sorted(names)) or "(?!)"


DATASET_KEYS = alternatives(config["datasets"])
POOL_KEYS = alternatives(config["signatures"]["pools"])


def runs():
    """(model, dataset) pairs in config order, without repeats."""
    return list(dict.fromkeys((run["model"], run["dataset"]) for run in config["runs"]))


def equilearning_folder(model, dataset):
    return f"results/equilearning/{model}/{dataset}"


SYNTHETIC_FIGURES = ("dynamics", "embeddings", "signatures", "unembedding")
SYNTHETIC_DATA_KEYS = ("anchors", "keys", "n_samples", "test_fraction", "data_seed")
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
)


def synthetic_data_settings():
    """What an addition task's data depend on (its kind is the wildcard)."""
    return {key: config["synthetic"][key] for key in SYNTHETIC_DATA_KEYS}


def synthetic_training_settings():
    """What a trained addition model depends on besides its data."""
    return {key: config["synthetic"][key] for key in SYNTHETIC_TRAINING_KEYS}


def synthetic_pairs():
    """Every (task, model) of the synthetic stage, in config order."""
    synthetic = config["synthetic"]
    return [
        (task, model) for task in synthetic["tasks"] for model in synthetic["models"]
    ]


def synthetic_inputs():
    """The tables and arrays the synthetic summary and figures read."""
    return {
        "records": [
            f"results/synthetic/{t}/{m}/r_order.csv" for t, m in synthetic_pairs()
        ],
        "weights": [
            f"results/synthetic/{t}/{m}/weights.npz" for t, m in synthetic_pairs()
        ],
        "signatures": [
            f"results/synthetic/{task}/signatures.npz"
            for task in config["synthetic"]["tasks"]
        ],
    }


def synthetic_outputs():
    if not config["synthetic"]["tasks"]:
        return []
    return [
        "results/synthetic/summary.csv",
        *[
            f"results/synthetic/{task}/signatures.csv"
            for task in config["synthetic"]["tasks"]
        ],
        *[f"results/synthetic/{name}.{PLOT_FORMAT}" for name in SYNTHETIC_FIGURES],
    ]


def final_outputs():
    outputs = (
        [
            "results/equilearning/summary.csv",
            "results/equilearning/best_datasets.csv",
            f"results/equilearning/summary.{PLOT_FORMAT}",
        ]
        if runs()
        else []
    )
    for model, dataset in runs():
        folder = equilearning_folder(model, dataset)
        outputs += [
            f"{folder}/law.csv",
            f"{folder}/law.{PLOT_FORMAT}",
            f"{folder}/norms.{PLOT_FORMAT}",
            f"{folder}/fuzziness.{PLOT_FORMAT}",
            f"{folder}/token_views.{PLOT_FORMAT}",
        ]
        if config["hidden_states"]["keep"]:
            outputs.append(f"results/hidden/{model}/{dataset}")
    return (
        outputs
        + signature_outputs()
        + coupling_outputs()
        + training_outputs()
        + series_outputs()
        + synthetic_outputs()
    )


def signature_folder(model, dataset):
    return f"results/signatures/{model}/{dataset}"


SIGNATURE_FIGURES = ("heatmaps", "deciles", "per_token", "digits")


def signature_corpora(model):
    """The corpora a model's signatures are compared on, in config order."""
    return [
        run["dataset"] for run in config["signatures"]["runs"] if run["model"] == model
    ]


def signature_outputs():
    outputs = []
    for run in config["signatures"]["runs"]:
        folder = signature_folder(run["model"], run["dataset"])
        outputs += [f"{folder}/rcos.csv", f"{folder}/percentiles.csv"]
        outputs += [f"{folder}/{name}.{PLOT_FORMAT}" for name in SIGNATURE_FIGURES]
    for model in dict.fromkeys(run["model"] for run in config["signatures"]["runs"]):
        outputs += [
            f"results/signatures/{model}/rcos_by_corpus.csv",
            f"results/signatures/{model}/rcos_by_corpus.{PLOT_FORMAT}",
            f"results/signatures/{model}/per_token_by_corpus.{PLOT_FORMAT}",
        ]
    return outputs


def pool_members(kind):
    """Input function: the ``kind`` counts of every dataset of a pool."""

    def members(wildcards):
        return [
            f"{signature_folder(wildcards.model, member)}/{kind}.parquet"
            for member in config["signatures"]["pools"][wildcards.dataset]
        ]

    return members


def check_coupling():
    """Coupling runs name known models and prompt sets; prompt sets name known datasets."""
    coupling = config["coupling"]
    for name, prompts in coupling["prompts"].items():
        for dataset in prompt_datasets(prompts):
            if dataset not in config["datasets"]:
                raise WorkflowError(
                    f"config coupling.prompts.{name}.dataset names {dataset!r}, which is "
                    f"not a key of datasets; known datasets: {sorted(config['datasets'])}"
                )
    for index, run in enumerate(coupling["runs"]):
        for kind, table in (
            ("model", config["models"]),
            ("prompts", coupling["prompts"]),
        ):
            if run[kind] not in table:
                raise WorkflowError(
                    f"config coupling.runs[{index}].{kind} is {run[kind]!r}; known: "
                    f"{sorted(table)}"
                )


check_coupling()

COUPLING_FIGURES = ("depth", "tokens", "adjacency", "singular_values")
TRAJECTORY_FIGURES = ("shape", "pca", "layers")


def coupling_outputs():
    outputs = []
    for run in config["coupling"]["runs"]:
        model, prompts = run["model"], run["prompts"]
        outputs += [
            f"results/coupling/{model}/{prompts}/{name}.{PLOT_FORMAT}"
            for name in COUPLING_FIGURES
        ]
        outputs += [
            f"results/trajectories/{model}/{prompts}/{name}.{PLOT_FORMAT}"
            for name in TRAJECTORY_FIGURES
        ]
    return outputs


def prompt_sentences(wildcards):
    """The sampled texts a prompt set draws from, if any."""
    prompt_set = config["coupling"]["prompts"][wildcards.prompts]
    return [sentences_of(dataset) for dataset in prompt_datasets(prompt_set)]


def model_preparation(wildcards):
    """What preparing a model depends on: its configuration but the forward passes'
    precision (``dtype``, applied by later stages), what only plans jobs (``gpus``,
    ``size``) and its external ``scores``."""
    return {
        key: value
        for key, value in config["models"][wildcards.model].items()
        if key not in ("dtype", "gpus", "size", "scores")
    }


def trained_weights(wildcards):
    """A training checkpoint's weights exist once its training's manifest does."""
    training = config["models"][wildcards.model]["source"].get("training")
    return [] if training is None else [f"results/training/{training}/checkpoints.csv"]


def initial_model(wildcards):
    """The prepared step-0 checkpoint of a training checkpoint: the weights its coupling
    is compared with (other models are compared with a randomly initialised twin)."""
    initial = initial_weights(config["models"], wildcards.model)
    return [] if initial is None else [f"results/models/{initial}"]


def counts_folder(model, corpus):
    """Where a corpus's counts for ``model``'s tokenizer lie (shared by the checkpoints
    of a training)."""
    return signature_folder(tokenizer_owner(config["models"], config, model), corpus)


def dataset_config(wildcards):
    return config["datasets"][wildcards.dataset]


def sentences_of(dataset):
    return f"results/corpus/{dataset}/sentences.parquet"


def excluded_sentences(wildcards):
    """The samples of the datasets a dataset leaves out (``exclude``)."""
    return [sentences_of(name) for name in dataset_config(wildcards)["exclude"]]


def training_config(wildcards):
    return config["training"][wildcards.training]


def held_out_sentences(wildcards):
    held_out = training_config(wildcards)["held_out"]
    return [] if held_out is None else [sentences_of(held_out)]


# The norm of the series' law columns: the paper's (`model`) when it is measured.
SERIES_NORM = (
    "model"
    if "model" in config["equilearning"]["norms"]
    else config["equilearning"]["norms"][0]
)


def series_member_files(wildcards):
    """Per member of a series: its x, scores and the paths of everything measured on it
    (the summary script's params; the same paths are its inputs)."""
    series = config["series"][wildcards.series]
    members = []
    for member in SERIES[wildcards.series]:
        model, prompts = member.model, series["prompts"]
        corpus = signature_corpus(config, config["models"], wildcards.series, model)
        folders = {d: equilearning_folder(model, d) for d in series["datasets"]}
        members.append(
            {
                "model": model,
                "x": member.x,
                "scores": config["models"][model].get("scores", {}),
                "facts": f"results/models/{model}/layerlaws_model.json",
                "law": {d: f"{folder}/law.csv" for d, folder in folders.items()},
                "evaluation": {
                    d: f"results/evaluation/{model}/{d}.csv" for d in series["datasets"]
                },
                "depth": (
                    None
                    if prompts is None
                    else f"results/coupling/{model}/{prompts}/depth.csv"
                ),
                "trajectories": (
                    None
                    if prompts is None
                    else f"results/trajectories/{model}/{prompts}/tokens.csv"
                ),
                "rcos": (
                    None
                    if corpus is None
                    else f"{signature_folder(model, corpus)}/rcos.csv"
                ),
            }
        )
    return members


def series_inputs(wildcards):
    paths = []
    for member in series_member_files(wildcards):
        paths.append(member["facts"].rsplit("/", 1)[0])
        paths += [*member["law"].values(), *member["evaluation"].values()]
        paths += [member[k] for k in ("depth", "trajectories", "rcos") if member[k]]
    return paths


def training_outputs():
    return [
        path
        for training in config["training"]
        for path in (
            f"results/training/{training}/curve.{PLOT_FORMAT}",
            f"results/training/{training}/checkpoints.csv",
        )
    ]


def series_outputs():
    return [
        f"results/series/{series}/{name}"
        for series in config["series"]
        for name in (
            "summary.csv",
            "fits.csv",
            f"quantities.{PLOT_FORMAT}",
            f"generalisation.{PLOT_FORMAT}",
        )
    ]
