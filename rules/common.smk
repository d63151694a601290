# Helpers shared by all stages: config validation, cross-checks, output lists.
# Nothing else reads the raw YAML.
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

validate(config, workflow.source_path("../schemas/config.schema.yaml"))

KEY_PATTERN = "[A-Za-z0-9][A-Za-z0-9_.-]*"
PLOT_FORMAT = config["plots"]["format"]


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
    return outputs


def model_config(wildcards):
    return config["models"][wildcards.model]


def dataset_config(wildcards):
    return config["datasets"][wildcards.dataset]
