# Helpers shared by all stages: the config's validation, its expansion and the results
# layout (built once, in layerlaws.pipeline), and one-line input and param functions.
# The config itself is never changed after validation.
#
# - Settings that change results are rule params, so changing one reruns exactly the jobs
#   that use it (and what follows). A stage's settings reach its rule as one param,
#   settings=<Settings>.params(config[<block>]): the keys its settings class reads.
# - Execution settings (the config's `execution` block) change how a job runs, never what
#   it computes: they are never params. Rules read them through EXECUTION (for resources),
#   scripts through layerlaws.pipeline.execution.Execution.from_config(snakemake.config).
import os

import yaml
from snakemake.exceptions import WorkflowError
from snakemake.logging import logger
from snakemake.resources import Resources
from snakemake.utils import validate

from layerlaws.core.config_errors import (
    file_problems,
    problems_message,
    schema_problems,
)
from layerlaws.core.errors import LayerlawsError
from layerlaws.models.downloads import OFFLINE_VARIABLES as HUB_OFFLINE_VARIABLES
from layerlaws.models.quantization import stage_quantization
from layerlaws.pipeline.execution import Execution
from layerlaws.pipeline.expansion import ExpandedConfig
from layerlaws.pipeline.layout import Layout
from layerlaws.pipeline.planning import JobPlanner
from layerlaws.pipeline.preflight import (
    device_problems,
    preflight_message,
    preflight_problems,
)
from layerlaws.pipeline.renamed_keys import renamed_key_errors
from layerlaws.rehearsal.counts import divided_counts
from layerlaws.pipeline.targets import Targets, alternatives, plot_options, series_norm
from layerlaws.synthetic.tasks import TASKS as ADDITION_TASKS

SCHEMA = workflow.source_path("../layerlaws/config.schema.yaml")

# The config files' YAML (keys given twice, words read as booleans), then old keys, then the
# schema, each problem in a line; Snakemake's validation then fills in the defaults.
CONFIG_PROBLEMS = [
    problem for path in workflow.configfiles for problem in file_problems(path)
]
CONFIG_PROBLEMS = (
    CONFIG_PROBLEMS or renamed_key_errors(config) or schema_problems(config)
)
if CONFIG_PROBLEMS:
    raise WorkflowError(problems_message(CONFIG_PROBLEMS))
validate(config, SCHEMA)
# A rehearsal on tiny stand-ins (python -m layerlaws.rehearsal) divides the counts by
# rehearsal.divide_counts_by; 1, the default, leaves them as written.
config.update(divided_counts(config))

# Revisions and training checkpoints become models, series become runs: every stage sees
# one model per measured set of weights.
LAYOUT = Layout()
try:
    EXPANDED = ExpandedConfig.from_config(config, LAYOUT)
except LayerlawsError as error:
    raise WorkflowError(f"{error}") from None
EXECUTION = Execution.from_config(config)
PLANNER = JobPlanner(EXPANDED, LAYOUT)
# Whether the jobs run on other machines (a cluster executor), or this is one of its jobs.
# Snakemake chooses the executor only after parsing (workflow.executor_plugin is None now,
# workflow.remote_exec False and workflow.local_exec True for any), but a cluster executor
# needs --jobs (nodes; a local run's --jobs becomes --cores).
JOBS_GO_ELSEWHERE = workflow.remote_exec or workflow.resource_settings.nodes is not None
# What would stop a job, found now (a line each): the datasets left out, the sources of the
# models and datasets read, token-view layers beyond a model's depth. In the main process
# only: a cluster job's Snakemake parses the workflow again, after these checks.
if workflow.is_main_process:
    PREFLIGHT_PROBLEMS = preflight_problems(PLANNER)
    if PREFLIGHT_PROBLEMS:
        raise WorkflowError(preflight_message(PREFLIGHT_PROBLEMS))
    # execution.device: cuda without a GPU here: a dry run warns unless the jobs go
    # elsewhere (JOBS_GO_ELSEWHERE); a run stops in onstart, below.
    if not JOBS_GO_ELSEWHERE:
        for problem in device_problems(EXECUTION.device, jobs_run_here=True):
            logger.warning(
                f"Warning: {problem}; else the jobs that claim a GPU stop the run."
            )
# A job Snakemake runs elsewhere (a cluster job, on a compute node that may have no
# internet) reads the Hugging Face hub offline: local jobs on the submitting host fetched
# the models and sampled the hub datasets before it (`snakemake download`,
# docs/gpus-and-clusters.md#compute-nodes-without-internet). HF_HUB_OFFLINE=0 and
# HF_DATASETS_OFFLINE=0 exported before the run let the cluster jobs go online.
if not workflow.is_main_process:
    for variable in HUB_OFFLINE_VARIABLES:
        os.environ.setdefault(variable, "1")
PLOT_FORMAT = config["plots"]["format"]
TARGETS = Targets(EXPANDED, LAYOUT, PLOT_FORMAT)
# Threads of the jobs that run a model (passes, hidden states, coupling, training): half
# the cores Snakemake is given, 1 to 4, so that on a 2-core machine two such jobs run side
# by side (small models gain little from a second thread; the numbers do not depend on
# it) and on a workstation each gets 4. Under a cluster executor, and in its jobs, 4:
# the CPUs a job asks the scheduler for, whatever --cores the submitting run was given.
MODEL_THREADS = (
    4
    if JOBS_GO_ELSEWHERE
    else min(4, max(1, (workflow.resource_settings.cores or 8) // 2))
)

with open(SCHEMA) as schema_file:
    KEY_PATTERN = yaml.safe_load(schema_file)["$defs"]["key"]["pattern"].strip("^$")
# A model key, or one expanded from a revision or a training checkpoint: <key>@<name>.
MODEL_PATTERN = f"{KEY_PATTERN}(@{KEY_PATTERN})?"
DATASET_KEYS = alternatives(config["datasets"])
POOL_KEYS = alternatives(config["signatures"]["pools"])
TASK_KEYS = "|".join(ADDITION_TASKS)


def given_gpus():
    """The GPUs of ``--resources gpu=N`` (1 when none is given), for ``snakemake estimate``'s
    wall time."""
    given = workflow.resource_settings.resources
    value = given.get("gpu") if hasattr(given, "get") else None
    return int(getattr(value, "value", value) or 1)


# The run's default-resources (a profile's or --default-resources'), which Snakemake gives
# every rule before its own resources.
DEFAULT_RESOURCES = Resources.from_mapping(
    workflow.resource_settings.default_resources or {}
)


def job_partition(gpus, **job):
    """The SLURM partition of a job that claims ``gpus`` GPUs: execution.gpu_partition
    when it claims one and that is set, else the default-resources' `slurm_partition`
    evaluated for the job (``job``: what Snakemake evaluates resources with); None when
    there is none (no SLURM profile)."""
    if gpus and EXECUTION.gpu_partition:
        return EXECUTION.gpu_partition
    return DEFAULT_RESOURCES.get("slurm_partition").evaluate(**job).value


def needs(job):
    """The resource functions of the model-running rules, from a JobPlanner method
    ``job``: GPUs, host memory, disk and runtime from the prepared model's size and the
    run's tokens, evaluated when the job's inputs exist, and the SLURM partition that
    follows the GPU claim (``job_partition``; ``gpus``: a claim to route instead, for
    ``rule_partitions``). The CPUs of a job are its rule's threads (the SLURM plugin's
    --cpus-per-task). A job is planned once for its wildcards and the state of its inputs
    (which exist, and when each was written), not once per resource."""
    plans = {}

    def planned(wildcards, input):
        inputs = tuple(
            (path, os.stat(path).st_mtime_ns if os.path.exists(path) else None)
            for path in input
        )
        key = (tuple(wildcards.items()), inputs)
        if key not in plans:
            plans[key] = job(wildcards, input)
        return plans[key]

    def need(name):
        return lambda wildcards, input: getattr(planned(wildcards, input), name)

    def partition(wildcards, input, attempt, threads, rulename, async_run, gpus=None):
        return job_partition(
            planned(wildcards, input).gpu if gpus is None else gpus,
            wildcards=wildcards,
            input=input,
            attempt=attempt,
            threads=threads,
            rulename=rulename,
            async_run=async_run,
        )

    resources = {name: need(name) for name in ("gpu", "mem_mb", "disk_mb", "runtime")}
    return {**resources, "slurm_partition": partition}


def model_dtype(wildcards):
    return EXPANDED.models[wildcards.model]["dtype"]


def model_quantization(stage):
    """The model's quantisation in ``stage`` (passes or coupling), as a params function."""
    return lambda wildcards: stage_quantization(EXPANDED.models[wildcards.model], stage)


def model_probe(wildcards):
    return EXPANDED.models[wildcards.model].get("probe", "auto")


def model_preparation(wildcards):
    return TARGETS.model_preparation(wildcards.model)


def trained_weights(wildcards):
    return TARGETS.trained_weights(wildcards.model)


def model_download(wildcards):
    return TARGETS.model_download(wildcards.model)


def download_settings(wildcards):
    return TARGETS.download_settings(wildcards.model)


def initial_model(wildcards):
    return TARGETS.initial_model(wildcards.model)


def dataset_config(wildcards):
    return config["datasets"][wildcards.dataset]


def excluded_sentences(wildcards):
    return TARGETS.excluded_sentences(wildcards.dataset)


def training_config(wildcards):
    return config["training"][wildcards.training]


def held_out_sentences(wildcards):
    return TARGETS.held_out_sentences(wildcards.training)


def prompt_sentences(wildcards):
    return TARGETS.prompt_sentences(wildcards.prompts)


def pass_shards(wildcards):
    """The shard files of an equi-learning pass (none when it is one job)."""
    shards = config["equilearning"]["shards"]
    if shards == 1:
        return []
    return [
        LAYOUT.equilearning_shard(wildcards.model, wildcards.dataset, str(shard))
        for shard in range(shards)
    ]


def coupling_shards(wildcards):
    """The shard files of a coupling job (none when it is one job)."""
    shards = config["coupling"]["shards"]
    if shards == 1:
        return []
    return [
        LAYOUT.coupling_shard(wildcards.model, wildcards.prompts, str(shard))
        for shard in range(shards)
    ]


def pool_members(kind):
    return lambda wildcards: TARGETS.pool_members(
        wildcards.model, wildcards.dataset, kind
    )


def tokenizer_counts(kind):
    return lambda wildcards: TARGETS.counts(wildcards.model, wildcards.dataset, kind)


def corpus_files(name):
    return lambda wildcards: TARGETS.corpus_files(wildcards.model, name)


def signature_corpora(wildcards):
    return EXPANDED.signature_corpora(wildcards.model)


def series_inputs(wildcards):
    return TARGETS.series_inputs(wildcards.series)


def series_summary_members(wildcards):
    return TARGETS.series_summary_members(wildcards.series)


def series_x(wildcards):
    return config["series"][wildcards.series]["x"]


def rule_partitions(wildcards):
    """Rule name → its `slurm_partition` resource as Snakemake resolves it (default-resources,
    the rule's own, set-resources), or None where none is set. A model-running rule's
    follows its job's GPU claim (``needs``): here the claim of the jobs `snakemake
    estimate` plans (GPUs unless execution.device is cpu)."""
    planned = max((row["gpu"] for row in PLANNER.plan()), default=0)
    return {
        declared.name: declared.resources.get("slurm_partition")
        .evaluate(
            wildcards=wildcards,
            input=[],
            attempt=1,
            threads=1,
            rulename=declared.name,
            async_run=None,
            gpus=planned,
        )
        .value
        for declared in workflow.rules
    }


def local_gpu_jobs():
    """Whether jobs that claim a GPU (a `gpu` resource) are about to run on this machine:
    under a local executor (not a cluster's, nor --touch), once the DAG is built."""
    executor = workflow.executor_plugin.common_settings
    if not executor.local_exec or executor.touch_exec or not workflow.is_main_process:
        return False
    return any("gpu" in job.rule.resources for job in workflow.dag.needrun_jobs())


# Before the first job of a run (never of a dry run), where Snakemake has chosen the
# executor: execution.device: cuda needs a GPU here when jobs that claim one run here.
onstart:
    DEVICE_PROBLEMS = device_problems(
        EXECUTION.device, jobs_run_here=local_gpu_jobs()
    )
    if DEVICE_PROBLEMS:
        raise WorkflowError(preflight_message(DEVICE_PROBLEMS))
