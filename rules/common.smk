# Helpers shared by all stages: config validation, cross-checks, output lists, and the
# two ways settings reach a job. Nothing else reads the raw YAML.
#
# - Settings that change results are rule params, so changing one reruns exactly the jobs
#   that use it (and what follows).
# - Execution settings (the config's `execution` block) change how a job runs, never what
#   it computes: they are never params. Rules read them through EXECUTION (for resources),
#   scripts through layerlaws.execution.Execution.from_config(snakemake.config).
import re

import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from layerlaws.execution import Execution
from layerlaws.job_needs import JobPlanner
from layerlaws.renamed_keys import renamed_key_errors

SCHEMA = workflow.source_path("../schemas/config.schema.yaml")

if renamed_key_errors(config):
    raise WorkflowError("\n".join(renamed_key_errors(config)))
validate(config, SCHEMA)

with open(SCHEMA) as schema_file:
    KEY_PATTERN = yaml.safe_load(schema_file)["$defs"]["key"]["pattern"].strip("^$")
EXECUTION = Execution.from_config(config)
PLOT_FORMAT = config["plots"]["format"]
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


def check_runs():
    """Every run names a configured model and dataset."""
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


def final_outputs():
    outputs = [
        "results/equilearning/summary.csv",
        f"results/equilearning/summary.{PLOT_FORMAT}",
    ]
    for model, dataset in runs():
        folder = equilearning_folder(model, dataset)
        outputs += [
            f"{folder}/law.csv",
            f"{folder}/law.{PLOT_FORMAT}",
            f"{folder}/norms.{PLOT_FORMAT}",
        ]
        if config["hidden_states"]["keep"]:
            outputs.append(f"results/hidden/{model}/{dataset}")
    return outputs + signature_outputs() + coupling_outputs()


def signature_folder(model, dataset):
    return f"results/signatures/{model}/{dataset}"


SIGNATURE_FIGURES = ("heatmaps", "deciles", "per_token", "digits")


def signature_outputs():
    outputs = []
    for run in config["signatures"]["runs"]:
        folder = signature_folder(run["model"], run["dataset"])
        outputs += [f"{folder}/rcos.csv", f"{folder}/percentiles.csv"]
        outputs += [f"{folder}/{name}.{PLOT_FORMAT}" for name in SIGNATURE_FIGURES]
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
        if (
            prompts["dataset"] is not None
            and prompts["dataset"] not in config["datasets"]
        ):
            raise WorkflowError(
                f"config coupling.prompts.{name}.dataset is {prompts['dataset']!r}, which is "
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

COUPLING_FIGURES = ("depth", "tokens", "adjacency")
TRAJECTORY_FIGURES = ("shape", "pca")


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
    dataset = config["coupling"]["prompts"][wildcards.prompts]["dataset"]
    return [] if dataset is None else [f"results/corpus/{dataset}/sentences.parquet"]


def model_preparation(wildcards):
    """What preparing a model depends on: its configuration but the forward passes'
    precision (``dtype``, applied by later stages) and what only plans jobs (``gpus``,
    ``size``)."""
    return {
        key: value
        for key, value in config["models"][wildcards.model].items()
        if key not in ("dtype", "gpus", "size")
    }


def dataset_config(wildcards):
    return config["datasets"][wildcards.dataset]
