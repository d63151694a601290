# Start-up, shared by all stages: the config's validation and the workflow's shared objects
# (layerlaws.pipeline.startup), the checks before the first job, and what depends on how
# Snakemake runs the jobs. The config itself is never changed after validation.
#
# - Settings that change results are rule params, so changing one reruns exactly the jobs
#   that use it (and what follows). A stage's settings reach its rule as one param,
#   settings=<Settings>.params(config[<block>]): the keys its settings class reads.
# - Execution settings (the config's `execution` block) change how a job runs, never what
#   it computes: they are never params. Rules read them through EXECUTION (for resources),
#   scripts through layerlaws.pipeline.execution.Execution.from_config(snakemake.config).
# - Functions of a job's wildcards: layerlaws.pipeline.rule_functions.
import os

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger
from snakemake.resources import Resources
from snakemake.utils import validate

from layerlaws.core.config_errors import problems_message
from layerlaws.core.errors import LayerlawsError
from layerlaws.core.settings import SCHEMA_FILE
from layerlaws.models.downloads import OFFLINE_VARIABLES as HUB_OFFLINE_VARIABLES
import layerlaws.pipeline.rule_functions as on
from layerlaws.pipeline.preflight import (
    device_problems,
    preflight_message,
    preflight_problems,
)
from layerlaws.pipeline.stages import RULE_FILES
from layerlaws.pipeline.startup import (
    Pipeline,
    config_problems,
    hub_files_location,
    model_threads,
    wildcard_patterns,
)
from layerlaws.pipeline.targets import plot_options, series_norm
from layerlaws.rehearsal.counts import divided_counts

# The config files' YAML, then old keys, then the schema, each problem in a line;
# Snakemake's validation then fills in the defaults. A rehearsal on tiny stand-ins
# (python -m layerlaws.rehearsal) divides the counts by rehearsal.divide_counts_by. A
# relative hub_files is read in the repository.
CONFIG_PROBLEMS = config_problems(workflow.configfiles, config)
if CONFIG_PROBLEMS:
    raise WorkflowError(problems_message(CONFIG_PROBLEMS))
validate(config, str(SCHEMA_FILE))
config["hub_files"] = hub_files_location(config)
config.update(divided_counts(config))
# Whether the jobs run on other machines (a cluster executor), or this is one of its jobs.
# Snakemake chooses the executor only after parsing (workflow.executor_plugin is None now,
# workflow.remote_exec False and workflow.local_exec True for any), but a cluster executor
# needs --jobs (nodes; a local run's --jobs becomes --cores).
JOBS_GO_ELSEWHERE = workflow.remote_exec or workflow.resource_settings.nodes is not None
# A training of gpus: auto spreads each job over the run's --resources gpu= (a cluster
# job's Snakemake is given its own job's), on one node.
TRAINING_GPUS = on.training_gpus(
    workflow.resource_settings.resources,
    config["execution"]["device"],
    jobs_run_here=not JOBS_GO_ELSEWHERE,
)
try:
    PIPELINE = Pipeline.start(config, TRAINING_GPUS)
except LayerlawsError as error:
    raise WorkflowError(f"{error}") from None
LAYOUT, EXPANDED, TARGETS = PIPELINE.layout, PIPELINE.expanded, PIPELINE.targets
EXECUTION, PLANNER = PIPELINE.execution, PIPELINE.planner
PLOT_FORMAT = config["plots"]["format"]
WILDCARDS = wildcard_patterns(config)
MODEL_THREADS = model_threads(workflow.resource_settings.cores, JOBS_GO_ELSEWHERE)
# What would stop a job, found now (a line each), in the main process only: a cluster
# job's Snakemake parses the workflow again, after these checks. execution.device: cuda
# without a GPU here: a dry run warns unless the jobs go elsewhere; a run stops in onstart.
if workflow.is_main_process:
    PREFLIGHT_PROBLEMS = preflight_problems(PLANNER)
    if PREFLIGHT_PROBLEMS:
        raise WorkflowError(preflight_message(PREFLIGHT_PROBLEMS))
    for problem in device_problems(
        EXECUTION.device, jobs_run_here=not JOBS_GO_ELSEWHERE
    ):
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
# The run's default-resources (a profile's or --default-resources'), which Snakemake gives
# every rule before its own resources; a job's partition follows its GPU claim.
DEFAULT_RESOURCES = Resources.from_mapping(
    workflow.resource_settings.default_resources or {}
)
PARTITION = on.partition_router(
    EXECUTION.gpu_partition, DEFAULT_RESOURCES.get("slurm_partition")
)


def needs(rule_name):
    """The resources of a model-running rule's jobs (layerlaws.pipeline.planning)."""
    return on.job_resources(PLANNER.needs(rule_name), PARTITION)


def local_gpu_jobs():
    """Whether jobs that claim a GPU are about to run on this machine: under a local
    executor (not a cluster's, nor --touch), once the DAG is built."""
    executor = workflow.executor_plugin.common_settings
    if not executor.local_exec or executor.touch_exec or not workflow.is_main_process:
        return False
    return any("gpu" in job.rule.resources for job in workflow.dag.needrun_jobs())


# Before the first job of a run (never of a dry run), once Snakemake has chosen the
# executor: execution.device: cuda needs a GPU here when jobs that claim one run here.
onstart:
    DEVICE_PROBLEMS = device_problems(
        EXECUTION.device, jobs_run_here=local_gpu_jobs()
    )
    if DEVICE_PROBLEMS:
        raise WorkflowError(preflight_message(DEVICE_PROBLEMS))
