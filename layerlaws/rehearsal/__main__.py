"""``python -m layerlaws.rehearsal``: a config (``configs/paper.yaml`` by default) run as
written, every job of it, offline on a CPU, on tiny stand-ins of its hub models and
datasets (``layerlaws.rehearsal.standins``) with its counts divided by one factor.

Into ``--folder`` (made anew): ``hf/``, the stand-ins' Hugging Face home; ``rehearsal.yaml``,
the settings the rehearsal adds to the config (the factor, ``execution.device: cpu``);
``results/``, the run's outputs, each job's log ending with what it used
(``layerlaws.core.logs.use_line``). The run's console goes to ``snakemake.log`` there. It
ends with the line

    rehearsal_jobs=<done>/<planned> figures=<made>/<indexed> peak_vs_plan_max=<r> minutes=<m>

where ``figures`` counts the rows of the papers' figure index
(``configs/paper_figures.yaml``) whose outputs were all made, and ``peak_vs_plan_max`` is
the largest measured peak host memory over the memory the planner gave any job.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

from layerlaws.core.settings import with_defaults
from layerlaws.pipeline.startup import hub_files_location
from layerlaws.rehearsal.counts import divided_counts, renamed_checkpoints
from layerlaws.rehearsal.report import job_uses, uses_table
from layerlaws.rehearsal.standins import write_standins

REPOSITORY = Path(__file__).parents[2]
FIGURE_INDEX = REPOSITORY / "configs" / "paper_figures.yaml"


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m layerlaws.rehearsal", description=__doc__)
    parser.add_argument(
        "--config", default=str(REPOSITORY / "configs" / "paper.yaml"), help="the config rehearsed"
    )
    parser.add_argument(
        "--divide-counts-by",
        type=int,
        default=1000,
        metavar="FACTOR",
        help="rehearsal.divide_counts_by: texts, prompts, training steps, epochs … / FACTOR",
    )
    parser.add_argument(
        "--folder", default="results/rehearsal", help="made anew: stand-ins, results, console"
    )
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="--cores of the run")
    parser.add_argument(
        "--figure-index", default=str(FIGURE_INDEX), help="the figure index checked"
    )
    parser.add_argument(
        "--settings",
        help="a config file of settings added to the rehearsal's (e.g. shards, to rehearse them)",
    )
    parser.add_argument(
        "--snakemake",
        default="",
        help="more options for the run, one string (e.g. '--profile profiles/slurm --jobs 2')",
    )
    parser.add_argument("targets", nargs="*", help="outputs or rules to make (default: all)")
    return parser.parse_args(argv)


def _snakemake(folder: Path, configs: list[Path], targets: list[str]) -> list[str]:
    """Snakemake making ``targets`` (all: none given) with the repository's workflow in
    ``folder`` with ``configs`` (the targets first: --configfile takes every word after
    it)."""
    return [
        str(Path(sys.executable).with_name("snakemake")),
        *targets,
        "--snakefile",
        str(REPOSITORY / "Snakefile"),
        "--directory",
        str(folder),
        "--configfile",
        *map(str, configs),
    ]


def _job_count(command: list[str], environment: dict[str, str]) -> int:
    """The jobs a dry run of ``command`` plans (0 when nothing is to be done)."""
    listed = subprocess.run(
        [*command, "--dry-run", "--quiet", "rules"], capture_output=True, text=True, env=environment
    )
    if listed.returncode != 0:
        raise SystemExit(f"the dry run failed:\n{listed.stdout[-2000:]}{listed.stderr[-2000:]}")
    total = re.search(r"^total\s+(\d+)$", listed.stdout, re.M)
    return int(total.group(1)) if total else 0


def _figures(index: Path, folder: Path, renamed: dict[str, str]) -> tuple[int, int]:
    """(made, indexed) rows of the figure index under ``folder``: a row is made when all
    its outputs are, each named with its trained checkpoints ``renamed`` as the divided
    counts name them (``renamed_checkpoints``)."""
    if not index.exists():
        return 0, 0
    from layerlaws.pipeline.figure_index import made_outputs, read_index

    def divided(output: str) -> str:
        parts = output.split("/")
        return "/".join(renamed.get(part, part) for part in parts)

    rows = [
        dataclasses.replace(row, outputs=tuple(map(divided, row.outputs)))
        for row in read_index(index)
    ]
    return made_outputs(rows, folder)


def _merged(base: dict, extra: dict) -> dict:
    """``base`` updated by ``extra``, block by block, as Snakemake merges config files."""
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = value
    return merged


def main(argv: list[str]) -> int:
    arguments = _arguments(argv)
    folder = Path(arguments.folder).resolve()
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    settings = {
        "rehearsal": {"divide_counts_by": arguments.divide_counts_by},
        "execution": {"device": "cpu"},
    }
    overlay = folder / "rehearsal.yaml"
    overlay.write_text(yaml.safe_dump(settings))
    configs = [Path(arguments.config).resolve(), overlay]
    if arguments.settings:
        configs.append(Path(arguments.settings).resolve())
    config: dict = {}
    for path in configs:
        config = _merged(config, yaml.safe_load(path.read_text()))
    config["hub_files"] = hub_files_location(config)
    started = time.monotonic()
    written = with_defaults(config)
    scaled = divided_counts(written)
    models, datasets = write_standins(scaled, folder / "hf")
    print(f"stand-ins of {models} hub models and {datasets} hub datasets in {folder / 'hf'}")
    environment = {
        **os.environ,
        "HF_HOME": str(folder / "hf"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    command = _snakemake(folder, configs, arguments.targets)
    planned = _job_count(command, environment)
    print(f"{planned} jobs planned; the run's console: {folder / 'snakemake.log'}", flush=True)
    with (folder / "snakemake.log").open("w") as console:
        subprocess.run(
            [
                *command,
                "--cores",
                str(arguments.cores),
                "--resources",
                f"gpu={arguments.cores}",
                "--keep-going",
                *shlex.split(arguments.snakemake),
            ],
            stdout=console,
            stderr=subprocess.STDOUT,
            env=environment,
        )
    left = _job_count(command, environment)
    minutes = (time.monotonic() - started) / 60
    uses = job_uses(folder / "results" / "logs")
    print(uses_table(uses))
    renamed = renamed_checkpoints(written, scaled)
    made, indexed = _figures(Path(arguments.figure_index), folder, renamed)
    worst = max((use.ratio for use in uses), default=float("nan"))
    print(
        f"rehearsal_jobs={planned - left}/{planned} figures={made}/{indexed} "
        f"peak_vs_plan_max={worst:.2f} minutes={minutes:.1f}"
    )
    return 0 if left == 0 and worst <= 1 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
