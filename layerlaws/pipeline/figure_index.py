"""The papers' figure index (``configs/paper_figures.yaml``): one row per figure and table of
He & Su, Yao & Xu and Aubry et al., each naming the outputs of the paper config that draw or
tabulate it, or why it is not reproduced. Here (torch-free): the rows, read and checked
(``read_index``); every output they name; which of them a run made (``made_outputs``, the
rehearsal's ``figures=<made>/<indexed>``); the command that makes a row's outputs and what
it takes (its jobs and planned GPU-hours: ``layerlaws.pipeline.target_plan``), kept in a
snapshot beside the index (``configs/paper_figures_plan.json``: a dry run per row takes
minutes); and the docs' table (``docs/figures.md``), written by ``python -m
layerlaws.pipeline.figure_index configs/paper_figures.yaml docs/figures.md``
(``--write-snapshot`` plans the rows again first). A test checks that the page and the
snapshot are current and that the paper config makes every output named."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from layerlaws.core.atomic import atomic_path, write_json
from layerlaws.core.errors import LayerlawsError
from layerlaws.core.text_files import utf8_text
from layerlaws.pipeline.target_plan import TargetPlan, target_plans

PAPERS = {
    "he_su": ("He & Su", "A Law of Next-Token Prediction in Large Language Models"),
    "yao_xu": (
        "Yao & Xu",
        "Probability Signature: Bridging Data Semantics and Embedding Structure in Language Models",
    ),
    "aubry": (
        "Aubry et al.",
        "Transformer Block Coupling and its Correlation with Generalization in LLMs",
    ),
}
"""Each paper's key in the index: its authors and title, as the docs name it."""
CONFIG = "configs/paper.yaml"
"""The config whose outputs the index names, relative to the repository (the index lies
beside it)."""
RESULTS = "results/"
"""Where every output of the index lies: paths relative to Snakemake's working directory."""
RUN = "--cores 8 --resources gpu=2"
"""How a row's command runs: on a workstation, its jobs sharing two GPUs."""
WRITE_SNAPSHOT = "--write-snapshot"
WRITE_PAGE = "python -m layerlaws.pipeline.figure_index configs/paper_figures.yaml docs/figures.md"
"""The command that writes the page (and, with ``WRITE_SNAPSHOT``, the snapshot first)."""
USAGE = f"usage: {WRITE_PAGE} [{WRITE_SNAPSHOT}]"
WRITE_IT = f"write it: {WRITE_PAGE} {WRITE_SNAPSHOT}"
ROW_KEYS = ("paper", "item", "shows", "outputs", "not_reproduced", "note")


@dataclass(frozen=True)
class FigureRow:
    """One figure or table of a paper."""

    paper: str
    """The paper's key, one of ``PAPERS``."""
    item: str
    """The figure or table as the paper numbers it (``Fig. 1``, ``Fig. S8``, ``Table 1``)."""
    shows: str
    """What it shows, in a few words."""
    outputs: tuple[str, ...]
    """The outputs of ``CONFIG`` that draw or tabulate it (paths under ``results/``);
    empty when it is not reproduced."""
    not_reproduced: str | None
    """Why it is not reproduced (None when it is)."""
    note: str | None
    """Where the outputs only partly match the paper (None when they match)."""


def _text(value: Any, where: str, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise LayerlawsError(f"{where}: {key} must be a non-empty text; give it one")
    return value.strip()


def _outputs(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise LayerlawsError(f"{where}: outputs must be a non-empty list of paths under results/")
    for output in value:
        if not isinstance(output, str) or not output.startswith(RESULTS):
            raise LayerlawsError(
                f"{where}: output {output!r} is not a path under results/; name the file "
                f"the paper config writes (e.g. results/equilearning/gpt1/bookcorpus/law.svg)"
            )
    return tuple(value)


def _row(raw: Any, where: str) -> FigureRow:
    """One row of the file, checked; ``where`` names it in errors."""
    if not isinstance(raw, Mapping):
        raise LayerlawsError(f"{where}: a row is a mapping of the keys {', '.join(ROW_KEYS)}")
    where = f"{where} ({raw.get('paper', '?')} {raw.get('item', '?')})"
    unknown = sorted(set(raw) - set(ROW_KEYS))
    if unknown:
        raise LayerlawsError(
            f"{where}: unknown key {', '.join(map(str, unknown))}; a row has {', '.join(ROW_KEYS)}"
        )
    if raw.get("paper") not in PAPERS:
        raise LayerlawsError(
            f"{where}: paper is {raw.get('paper')!r}; it must be one of {', '.join(PAPERS)}"
        )
    if ("outputs" in raw) == ("not_reproduced" in raw):
        raise LayerlawsError(
            f"{where}: give exactly one of outputs (the files that make it) and "
            f"not_reproduced (why not)"
        )
    reproduced = "outputs" in raw
    reason = None if reproduced else _text(raw["not_reproduced"], where, "not_reproduced")
    return FigureRow(
        paper=raw["paper"],
        item=_text(raw.get("item"), where, "item"),
        shows=_text(raw.get("shows"), where, "shows"),
        outputs=_outputs(raw["outputs"], where) if reproduced else (),
        not_reproduced=reason,
        note=_text(raw["note"], where, "note") if "note" in raw else None,
    )


def read_index(path: str | os.PathLike[str]) -> tuple[FigureRow, ...]:
    """The rows of the figure index at ``path``, in order, checked: each with a known paper,
    an item, what it shows and exactly one of outputs and not_reproduced, no item twice for
    a paper. Raises LayerlawsError naming the row otherwise."""
    path = Path(path)
    if not path.is_file():
        raise LayerlawsError(f"figure index {path} not found; give the path of paper_figures.yaml")
    try:
        data = yaml.safe_load(utf8_text(path, "figure index"))
    except yaml.YAMLError as error:
        raise LayerlawsError(f"figure index {path} is not valid YAML: {error}") from None
    if not isinstance(data, list) or not data:
        raise LayerlawsError(f"figure index {path}: the file is a non-empty list of rows")
    rows, seen = [], {}
    for number, raw in enumerate(data, start=1):
        row = _row(raw, f"figure index {path} row {number}")
        key = (row.paper, row.item)
        if key in seen:
            raise LayerlawsError(
                f"figure index {path} row {number} ({row.paper} {row.item}): the item is "
                f"already row {seen[key]}; merge the two rows"
            )
        seen[key] = number
        rows.append(row)
    return tuple(rows)


def indexed_outputs(rows: Iterable[FigureRow]) -> list[str]:
    """Every output the rows name, each once, in row order."""
    return list(dict.fromkeys(output for row in rows for output in row.outputs))


def missing_outputs(rows: Iterable[FigureRow], folder: str | os.PathLike[str]) -> list[str]:
    """The outputs of the rows that are not files under ``folder``, Snakemake's working
    directory (the folder that holds ``results/``), each once, in row order."""
    return [output for output in indexed_outputs(rows) if not (Path(folder) / output).is_file()]


def made_outputs(rows: Sequence[FigureRow], folder: str | os.PathLike[str]) -> tuple[int, int]:
    """(made, indexed), counted per row, not per file: indexed is the number of reproduced
    rows (those with outputs), made the number of them whose every output is a file under
    ``folder``, Snakemake's working directory (a figure drawn by four files is made when all
    four are)."""
    missing = set(missing_outputs(rows, folder))
    reproduced = [row for row in rows if row.outputs]
    made = sum(1 for row in reproduced if missing.isdisjoint(row.outputs))
    return made, len(reproduced)


def command(outputs: Sequence[str]) -> str:
    """The command that makes ``outputs`` from ``CONFIG``, run from the repository: the
    targets before ``--configfile``, which takes every word after it as a config file."""
    return f".venv/bin/snakemake {' '.join(outputs)} --configfile {CONFIG} {RUN}"


@dataclass(frozen=True)
class FigurePlans:
    """What the rows of an index take (``layerlaws.pipeline.target_plan``), as its snapshot
    holds them."""

    config_sha256: str
    """The digest of the config they were planned from (``config_digest``)."""
    whole: TargetPlan
    """The config's rule all: every job of the config."""
    by_outputs: Mapping[tuple[str, ...], TargetPlan]
    """Each reproduced row's, by its outputs."""


def config_digest(config: str | os.PathLike[str]) -> str:
    """The SHA-256 of a config's settings (its YAML as read: comments and layout aside)."""
    settings = yaml.safe_load(utf8_text(Path(config), "config"))
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()


def index_files(index: str | os.PathLike[str]) -> tuple[Path, Path]:
    """The config beside an index (``CONFIG``'s name) and the index's snapshot
    (``<index>_plan.json``)."""
    index = Path(index)
    return index.parent / Path(CONFIG).name, index.with_name(f"{index.stem}_plan.json")


def plan_rows(rows: Sequence[FigureRow], config: str | os.PathLike[str]) -> FigurePlans:
    """What each reproduced row and the whole ``config`` take: a dry run each (seconds
    apiece)."""
    targets = [row.outputs for row in rows if row.outputs]
    plans = target_plans([(), *targets], Path(config))
    whole = plans.pop(())
    return FigurePlans(config_digest(config), whole, plans)


def _stored(plan: TargetPlan) -> dict[str, Any]:
    """A plan as the snapshot stores it (GPU-hours to 1/1000)."""
    return dataclasses.asdict(plan) | {"gpu_hours": round(plan.gpu_hours, 3)}


def write_snapshot(plans: FigurePlans, rows: Sequence[FigureRow], path: Path) -> None:
    """``plans`` as JSON at ``path``, each row's with its paper and item."""
    figures = [
        {"paper": row.paper, "item": row.item, "outputs": row.outputs}
        | _stored(plans.by_outputs[row.outputs])
        for row in rows
        if row.outputs
    ]
    data = {
        "config": CONFIG,
        "config_sha256": plans.config_sha256,
        "whole_config": _stored(plans.whole),
        "figures": figures,
    }
    write_json(path, data)


def read_snapshot(path: str | os.PathLike[str], config: str | os.PathLike[str]) -> FigurePlans:
    """The snapshot at ``path``, planned from ``config`` as it is now: a LayerlawsError
    saying what to run otherwise."""
    path = Path(path)
    if not path.is_file():
        raise LayerlawsError(f"snapshot {path} not found; {WRITE_IT}")
    data = json.loads(utf8_text(path, "snapshot"))
    if data["config_sha256"] != config_digest(config):
        raise LayerlawsError(
            f"snapshot {path} was planned from other settings than {config}'s; {WRITE_IT}"
        )
    plans = {
        tuple(figure["outputs"]): TargetPlan(
            figure["jobs"], figure["model_jobs"], figure["gpu_hours"]
        )
        for figure in data["figures"]
    }
    return FigurePlans(data["config_sha256"], TargetPlan(**data["whole_config"]), plans)


def _checked(rows: Sequence[FigureRow], plans: FigurePlans) -> None:
    """A LayerlawsError unless ``plans`` holds a plan for each reproduced row and no
    other."""
    unplanned = [
        f"{row.paper} {row.item}"
        for row in rows
        if row.outputs and row.outputs not in plans.by_outputs
    ]
    if unplanned:
        raise LayerlawsError(
            f"the figure index's snapshot has no plan of the outputs of {', '.join(unplanned)}: "
            f"it is stale; {WRITE_IT}"
        )
    if set(plans.by_outputs) - {row.outputs for row in rows}:
        raise LayerlawsError(
            f"the figure index's snapshot plans outputs that no row names: it is stale; {WRITE_IT}"
        )


def _cell(text: str) -> str:
    """``text`` safe inside a Markdown table cell."""
    return text.replace("|", "\\|")


def _how(row: FigureRow, plans: FigurePlans) -> str:
    """The row's cells after what it shows: the command, its jobs and GPU-hours."""
    if not row.outputs:
        return f"{_cell(f'not reproduced: {row.not_reproduced}')} | | |"
    note = f"<br>Note: {_cell(row.note)}" if row.note else ""
    plan = plans.by_outputs[row.outputs]
    return f"`{command(row.outputs)}`{note} | {plan.jobs:,} | {plan.gpu_hours:,.1f} |"


def render(rows: Sequence[FigureRow], plans: FigurePlans) -> str:
    """The page ``docs/figures.md``: per paper, a table of its figures and tables with what
    each shows and the command that makes it, with its jobs and planned GPU-hours
    (``plans``: a LayerlawsError when they are not those of ``rows``), or why it is not
    reproduced."""
    _checked(rows, plans)
    counts = []
    for paper, (authors, _) in PAPERS.items():
        of_paper = [row for row in rows if row.paper == paper]
        reproduced = sum(1 for row in of_paper if row.outputs)
        counts.append(f"{authors} {reproduced} of {len(of_paper)}")
    whole = plans.whole
    lines = [
        "# Reproducing the papers' figures",
        "",
        "Generated from the figure index (`configs/paper_figures.yaml`) and the plan of its",
        "rows (`configs/paper_figures_plan.json`) by",
        f"`{WRITE_PAGE}`",
        f"(with `{WRITE_SNAPSHOT}` it plans the rows again first, a dry run each: minutes);",
        "edit the index, not this page.",
        "",
        "Every figure and table of the three papers, main text and appendix, with the command",
        f"that builds it alone from `{CONFIG}` (hub models and GPUs, as the whole",
        "config needs: [Usage](workflow.md#usage)) or why it is not reproduced. Many are also",
        "drawn offline, on small models, by `make run` ([What the default run finds](results.md))",
        "and `make zoo` ([The zoo](zoo.md)); every output is described in [Outputs](outputs.md).",
        f"Run a command from the repository root as it is on a workstation (`{RUN}`:",
        "eight cores and two GPUs that its jobs share; give yours), with",
        "`--profile profiles/slurm` in place of those options on a SLURM cluster, or with `-n`",
        "added to list its jobs without running them",
        "([Reproduce one figure of a paper](recipes.md#reproduce-one-figure-of-a-paper)).",
        "",
        f"With a command (planned: built by every job of `{CONFIG}` on tiny stand-ins, "
        f"`make rehearse`, not yet at the papers' scale, which needs GPUs): {'; '.join(counts)}.",
        "",
        "**jobs**: every job that the command's dry run lists in a fresh checkout (downloads,",
        "model preparation, tokenising, model jobs, fits, figures). **GPU-hours**: planned,",
        "not measured: the GPUs × planned hours of the model jobs among them (model passes,",
        "coupling jobs, training segments), each as `snakemake estimate` plans it; the other",
        "jobs run on CPUs and count nothing. A job that several rows need counts in each (He &",
        "Su's Fig. 1 needs every equi-learning run, for `summary.csv`). The whole config",
        f"(its rule all): {whole.jobs:,} jobs, {whole.model_jobs:,} of them model jobs, "
        f"{whole.gpu_hours:,.1f} GPU-hours",
        "(the `gpu_hours` that `snakemake estimate` prints).",
    ]
    for paper, (authors, title) in PAPERS.items():
        lines += [
            f"\n## {authors}: *{title}*\n",
            "| item | what it shows | reproduce | jobs | GPU-hours |",
            "|---|---|---|---:|---:|",
        ]
        lines += [
            f"| {_cell(row.item)} | {_cell(row.shows)} | {_how(row, plans)}"
            for row in rows
            if row.paper == paper
        ]
    return "\n".join(lines) + "\n"


def main(arguments: list[str]) -> None:
    """Check the index at the first path and write its page to the second, from its
    snapshot (written first with ``--write-snapshot``)."""
    paths = [argument for argument in arguments if argument != WRITE_SNAPSHOT]
    if len(paths) != 2:
        raise SystemExit(USAGE)
    rows = read_index(paths[0])
    config, snapshot = index_files(paths[0])
    if WRITE_SNAPSHOT in arguments:
        write_snapshot(plan_rows(rows, config), rows, snapshot)
    page = render(rows, read_snapshot(snapshot, config))
    with atomic_path(Path(paths[1])) as path:
        path.write_text(page)


if __name__ == "__main__":
    main(sys.argv[1:])
