"""What would stop a job whose facts are on disk when the workflow is planned, found
before the first job runs (torch-free, so every dry run makes these checks in little time).

- Every dataset a dataset leaves out (``datasets.<key>.exclude``) is a dataset.
- The sources of the models the workflow prepares exist: a local folder with its
  config.json, a GGUF file, the installed packages (and the file or folder inside them)
  that carry a model. Hub models are not checked (they may be downloaded).
- The sources of the datasets it samples exist: local text files, the package that carries
  a packaged corpus, a hub dataset named by a local path.
- ``equilearning.token_views.layers`` are layers of every equi-learning run's model whose
  depth is known before it is prepared (``JobPlanner.known_shape``), and every K of
  ``coupling.ks`` is at most the hidden size of every coupling run's model.
- A training's forward and backward pass (``training.<key>.micro_batch_size``) fits one
  GPU (``execution.gpu_memory_gb``) where its vocabulary is known.
- Under ``hub_files`` (the record of the hub repositories' files), every hub model the
  workflow prepares is recorded there, and one whose repository holds no tokenizer names
  another source for it (``models.<key>.tokenizer``).
- ``execution.device: cuda`` has a GPU when the jobs run on this machine
  (``device_problems``, checked once Snakemake has chosen where the jobs run).

Each problem is one line: the config key, what is wrong, and what to do.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from layerlaws.core.errors import LayerlawsError, problem_list, require_key
from layerlaws.core.packages import distribution, install_command, package_file, package_folder
from layerlaws.coupling.workflow import ks_beyond
from layerlaws.models.hub_files import read_hub_files, tokenizer_problems
from layerlaws.pipeline.expansion import ExpandedConfig
from layerlaws.pipeline.planning import JobPlanner
from layerlaws.text.sources import CORPUS_DATA
from layerlaws.training.scheduling import training_fit_problem

MODEL_FOLDER = "give the folder that holds config.json, the weights and the tokenizer"
LOCAL_PATH = ("/", "./", "../", "~")
"""How a hub dataset's ``name`` that is a local folder starts."""
GPU_DEVICE_FILES = ("dev/nvidia[0-9]*", "proc/driver/nvidia/gpus/*", "dev/dxg", "dev/kfd")
"""Files that exist where a GPU is: NVIDIA's device nodes and driver entries, WSL's GPU
(``/dev/dxg``), AMD's ROCm (``/dev/kfd``), relative to the file system's root."""


def _missing(path: str, what: str) -> str:
    """Why ``path`` (a config's path, read as the jobs read it) is not the ``what``
    (``folder`` or ``file``) it should be, or "" when it is."""
    found = Path(path)
    if found.is_dir() if what == "folder" else found.is_file():
        return ""
    home = " (~ is not expanded here: give the full path)" if path.startswith("~") else ""
    return f"{path} {'is not a ' + what if found.exists() else 'does not exist'}{home}"


def exclude_problems(config: Mapping[str, Any]) -> list[str]:
    """Every entry of every ``datasets.<key>.exclude`` is a dataset key."""
    problems, known = [], config["datasets"]
    for key, dataset in known.items():
        for index, name in enumerate(dataset.get("exclude", [])):
            try:
                require_key(f"datasets.{key}.exclude[{index}]", name, "datasets", known)
            except LayerlawsError as error:
                problems.append(str(error))
    return problems


def prepared_models(expanded: ExpandedConfig) -> list[str]:
    """The models the workflow prepares, in order: those of the equi-learning, coupling and
    signature runs, the models whose tokenizers they use, and the trainings' tokenizer
    models; not the trainings' checkpoints (written by the workflow)."""
    runs = [*expanded.runs, *expanded.coupling_runs, *expanded.signature_runs]
    models = [model for run in runs for model in (run[0], expanded.tokenizer_owner(run[0]))]
    models += [training["tokenizer"] for training in expanded.config["training"].values()]
    return [
        model
        for model in dict.fromkeys(models)
        if model in expanded.models and "training" not in expanded.models[model]["source"]
    ]


def model_source_problem(source: Mapping[str, Any]) -> str:
    """Why a model's source cannot be read here, or "": a ``local`` folder with its
    config.json, a ``gguf_file``, the installed package and its ``file`` (``gguf_package``)
    or ``folder`` and ``tokenizer_vocabulary`` (``package_folder``), every package of
    ``package_parts``. A ``hub`` source is not checked."""
    kind = source["kind"]
    if kind == "local":
        missing = _missing(source["path"], "folder")
        if not missing and not (Path(source["path"]) / "config.json").is_file():
            missing = f"{source['path']} has no config.json"
        return f"path: {missing}; {MODEL_FOLDER}" if missing else ""
    if kind == "gguf_file":
        missing = _missing(source["path"], "file")
        return f"path: {missing}; give the path of a GGUF file" if missing else ""
    try:
        if kind == "gguf_package":
            package_file(source["package"], source["file"])
        elif kind == "package_folder":
            package_folder(source["package"], source["folder"])
            if source.get("tokenizer_vocabulary"):
                package_file(source["package"], source["tokenizer_vocabulary"])
    except LayerlawsError as error:
        return f"package: {error}"
    if kind == "package_parts":
        return _parts_problem(source["packages"])
    return ""


def _parts_problem(requirements: list[str]) -> str:
    """Why the packages of a ``package_parts`` source are not all installed, or ""."""
    wrong = []
    for requirement in requirements:
        try:
            distribution(requirement)
        except LayerlawsError as error:
            wrong.append((requirement, str(error)))
    if len(wrong) == 1:
        return f"packages: {wrong[0][1]}"
    if wrong:
        names = " ".join(requirement for requirement, _ in wrong)
        return (
            f"packages: {len(wrong)} of its {len(requirements)} packages are not installed (or "
            f"not in the version given); install them with `{install_command(names)}`"
        )
    return ""


def _source_problems(
    table: str, keys: list[str], entries: Mapping[str, Any], problem_of: Any
) -> list[str]:
    """A line per key of ``table`` (``models``, ``datasets``) whose source ``problem_of``
    finds a problem with."""
    return [
        f"config {table}.{key}.source.{problem}"
        for key in keys
        if (problem := problem_of(entries[key]["source"]))
    ]


def model_problems(expanded: ExpandedConfig) -> list[str]:
    """The source of every model the workflow prepares (``prepared_models``) can be read
    here (``model_source_problem``)."""
    return _source_problems(
        "models", prepared_models(expanded), expanded.models, model_source_problem
    )


def hub_file_problems(expanded: ExpandedConfig) -> list[str]:
    """Under the config's ``hub_files``: the data file reads, it records every hub model
    the workflow prepares, and each whose repository has no tokenizer names another
    source for it (``hub_files.tokenizer_problems``)."""
    path = expanded.config.get("hub_files")
    if not path:
        return []
    try:
        record = read_hub_files(path)
    except LayerlawsError as error:
        return [str(error)]
    return tokenizer_problems(record, expanded.models, prepared_models(expanded))


def sampled_datasets(expanded: ExpandedConfig) -> list[str]:
    """The datasets the workflow samples, in order: those of the equi-learning runs, of
    the signature runs (a pool's members), of the coupling runs' prompt sets, the
    trainings' datasets and held-out sets, and the datasets any of them leaves out."""
    config = expanded.config
    pools = config["signatures"]["pools"]
    names = [dataset for _, dataset in expanded.runs]
    for _, corpus in expanded.signature_runs:
        names += pools.get(corpus, [corpus])
    names += expanded.prompt_datasets()
    for training in config["training"].values():
        names += [training["dataset"], training["held_out"]]
    known = config["datasets"]
    found = [name for name in dict.fromkeys(names) if name in known]
    for name in found:  # found grows as it is read: what each leaves out, then theirs
        found += [other for other in known[name]["exclude"] if other in known.keys() - found]
    return found


def dataset_source_problem(source: Mapping[str, Any]) -> str:
    """Why a dataset's source cannot be read here, or "": every path of a ``files``
    source is a file, the package of a ``packaged`` corpus is installed with its data, and
    a ``hub`` dataset named by a local path (``/``, ``./``, ``../``, ``~``) exists."""
    kind = source["kind"]
    if kind == "files":
        missing = [
            f"paths[{index}]: {problem}"
            for index, path in enumerate(source["paths"])
            if (problem := _missing(path, "file"))
        ]
        if missing:
            return "; ".join(missing) + "; give text files (txt, jsonl, csv or parquet)"
        return ""
    if kind == "packaged" and source["corpus"] in CORPUS_DATA:
        package, path, what = CORPUS_DATA[source["corpus"]]
        try:
            (package_file if what == "file" else package_folder)(package, path)
        except LayerlawsError as error:
            return f"corpus: {source['corpus']} is read from a package: {error}"
        return ""
    name = source.get("name", "")
    if kind == "hub" and name.startswith(LOCAL_PATH) and not Path(name).expanduser().exists():
        return (
            f"name: {name} does not exist; give the folder of a dataset, or a dataset id of "
            f"the Hugging Face hub"
        )
    return ""


def dataset_problems(expanded: ExpandedConfig) -> list[str]:
    """The source of every dataset the workflow samples (``sampled_datasets``) can be read
    here (``dataset_source_problem``)."""
    return _source_problems(
        "datasets", sampled_datasets(expanded), expanded.config["datasets"], dataset_source_problem
    )


def token_view_problems(planner: JobPlanner) -> list[str]:
    """``equilearning.token_views.layers`` are layers 0…L of the model of every
    equi-learning run whose depth L is known now (``JobPlanner.known_shape``), a line per model
    (per training for its checkpoints); a model whose depth is not known yet is checked by
    its pass."""
    layers = planner.config["equilearning"]["token_views"]["layers"]
    found: dict[str, str] = {}
    for model, _ in planner.expanded.runs if layers else ():
        training = planner.expanded.models[model]["source"].get("training")
        what = f"training {training}'s checkpoints" if training else f"model {model}"
        known = None if what in found else planner.known_shape(model)
        beyond = [layer for layer in layers if known and layer > known[0]]
        if beyond:
            depth, _, read_from = known
            found[what] = (
                f"config equilearning.token_views.layers: {beyond} are not layers of {what}, "
                f"whose L is {depth} (read from its {read_from}); give layers 0…{depth}, or [] "
                f"for round(L/4), round(L/2), round(3L/4) and L"
            )
    return list(found.values())


def coupling_k_problems(planner: JobPlanner) -> list[str]:
    """Every K of ``coupling.ks`` is at most the hidden size d of each coupling run's model
    whose d is known now (``JobPlanner.known_shape``), a line per model."""
    ks, found = planner.config["coupling"]["ks"], {}
    for model, _ in planner.expanded.coupling_runs:
        known = None if model in found else planner.known_shape(model)
        problem = known and ks_beyond(ks, known[1])
        if problem:
            found[model] = f"config {problem} (model {model}, read from its {known[2]})"
    return list(found.values())


def training_fit_problems(planner: JobPlanner) -> list[str]:
    """Every training whose pass is planned at more than one GPU holds, where its
    vocabulary is known now (``training_fit_problem``), a line each."""
    return [
        problem
        for training in planner.config["training"]
        if (problem := training_fit_problem(planner, training))
    ]


def local_gpu_visible(environ: Mapping[str, str] | None = None, root: str | Path = "/") -> bool:
    """Whether this machine shows a GPU to the jobs, without importing torch: a
    ``GPU_DEVICE_FILES`` entry exists under ``root``, and CUDA_VISIBLE_DEVICES (when set)
    names a device first (``""``, ``-1`` or another word hide them all, as CUDA reads it)."""
    environ = os.environ if environ is None else environ
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        first = visible.split(",")[0].strip()
        if not (first.isdigit() or first.startswith(("GPU-", "MIG-"))):
            return False
    return any(next(Path(root).glob(pattern), None) for pattern in GPU_DEVICE_FILES)


def device_problems(
    device: str, *, jobs_run_here: bool, gpu_visible: bool | None = None
) -> list[str]:
    """``execution.device: cuda`` has a GPU where the jobs run, when that is this machine
    (``jobs_run_here``; not under a cluster executor, whose jobs run on other nodes).
    ``gpu_visible``: whether this machine shows a GPU (``local_gpu_visible()`` when None)."""
    if device != "cuda" or not jobs_run_here:
        return []
    if local_gpu_visible() if gpu_visible is None else gpu_visible:
        return []
    shown = os.environ.get("CUDA_VISIBLE_DEVICES")
    hidden = f" (CUDA_VISIBLE_DEVICES={shown!r})" if shown is not None else ""
    return [
        f"config execution.device: cuda, but this machine shows no GPU{hidden}; set "
        f"execution.device to auto or cpu, run on a GPU node, or send the jobs to a cluster "
        f"(--profile profiles/slurm)"
    ]


def preflight_message(problems: list[str]) -> str:
    """The message of a workflow that would stop at a job: a line per problem."""
    return problem_list("Found before the first job", problems)


def preflight_problems(planner: JobPlanner) -> list[str]:
    """Every problem of the planner's expanded config that the files and packages of this
    machine show, a line each: dataset exclusions, the sources of the models and datasets
    the workflow reads, the hub models' recorded files and tokenizers, token-view layers
    beyond a model's depth, a K of coupling.ks beyond a model's hidden size, a training
    whose pass does not fit one GPU. (The device is checked once the jobs' executor is
    known: ``device_problems``.)"""
    expanded = planner.expanded
    return [
        *exclude_problems(expanded.config),
        *model_problems(expanded),
        *hub_file_problems(expanded),
        *dataset_problems(expanded),
        *token_view_problems(planner),
        *coupling_k_problems(planner),
        *training_fit_problems(planner),
    ]
