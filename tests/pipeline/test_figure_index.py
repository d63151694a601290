"""The papers' figure index (configs/paper_figures.yaml): it holds every figure and table of
the three papers, the paper config makes every output it names (one dry run), a bad row
is a clear error naming it, the rehearsal's count of made figures, docs/figures.md is the
page it renders with its snapshot of each row's jobs and planned GPU-hours, a row's
command on that page runs as written, and the figure recipe quotes the plans."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from snakemake.utils import validate
from snakemake_runs import REPO, snakemake

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.settings import SCHEMA_FILE
from layerlaws.pipeline.expansion import ExpandedConfig
from layerlaws.pipeline.figure_index import (
    CONFIG,
    FigurePlans,
    indexed_outputs,
    made_outputs,
    main,
    missing_outputs,
    read_index,
    read_snapshot,
    render,
)
from layerlaws.pipeline.layout import Layout
from layerlaws.pipeline.planning import JobPlanner, gpu_hours_line
from layerlaws.pipeline.target_plan import TargetPlan, listed_jobs, target_plans
from layerlaws.pipeline.targets import Targets
from tests.pipeline.test_torch_free import assert_torch_free

INDEX = REPO / "configs" / "paper_figures.yaml"
SNAPSHOT = REPO / "configs" / "paper_figures_plan.json"
PAGE = REPO / "docs" / "figures.md"
RECIPES = REPO / "docs" / "recipes.md"
ITEMS = {
    "he_su": [f"Fig. {n}" for n in range(1, 9)] + [f"Fig. S{n}" for n in range(1, 13)],
    "yao_xu": [f"Fig. {n}" for n in range(1, 14)],
    "aubry": [f"Fig. {n}" for n in (1, 2, 3, 4, 8, 9, 10, 11, 12, 16, 17, 23, 24, 25, 34, 37)]
    + [f"Table {n}" for n in range(1, 5)],
}
"""Every figure and table caption in the papers' texts (Aubry et al.'s text numbers only
these; its other appendix figures appear as LaTeX labels)."""


def write_index(tmp_path, text: str):
    path = tmp_path / "figures.yaml"
    path.write_text(text)
    return path


GOOD = """\
- {paper: he_su, item: Fig. 1, shows: the law, outputs: [results/a.svg, results/b.csv]}
- {paper: he_su, item: Fig. 2, shows: views, outputs: [results/b.csv], note: one | two}
- {paper: aubry, item: Fig. 2, shows: a schematic, not_reproduced: no data}
"""
GOOD_PLANS = FigurePlans(
    "digest",
    TargetPlan(1363, 312, 2804.27),
    {
        ("results/a.svg", "results/b.csv"): TargetPlan(12, 3, 1234.56),
        ("results/b.csv",): TargetPlan(5, 0, 0.0),
    },
)
"""Plans of GOOD's reproduced rows."""


def test_the_index_holds_every_figure_and_table_of_the_papers_in_order():
    rows = read_index(INDEX)
    found = {paper: [row.item for row in rows if row.paper == paper] for paper in ITEMS}
    assert found == ITEMS
    assert all(row.shows for row in rows)


def test_the_paper_config_makes_every_indexed_output(tmp_path):
    """Each output is a target of the config's rule all (a rule could make others from its
    keys, such as a model on a dataset it never runs on), and Snakemake plans them all."""
    outputs = indexed_outputs(read_index(INDEX))
    config = yaml.safe_load((REPO / CONFIG).read_text())
    validate(config, str(SCHEMA_FILE))
    targets = Targets(ExpandedConfig.from_config(config), Layout(), config["plots"]["format"])
    assert len(outputs) > 50
    assert sorted(set(outputs) - set(targets.final_outputs())) == []
    result = snakemake(tmp_path, *outputs, "-n", "--quiet", configfile=REPO / CONFIG)
    printed = result.stdout + result.stderr
    assert "MissingRuleException" not in printed and "Missing input files" not in printed, printed
    assert result.returncode == 0, printed[-4000:]


def test_a_row_reads_with_its_outputs_note_or_reason(tmp_path):
    rows = read_index(write_index(tmp_path, GOOD))
    first, second, third = rows
    assert (first.paper, first.item, first.shows) == ("he_su", "Fig. 1", "the law")
    assert first.outputs == ("results/a.svg", "results/b.csv") and first.note is None
    assert (second.note, second.not_reproduced) == ("one | two", None)
    assert (third.outputs, third.not_reproduced) == ((), "no data")
    assert indexed_outputs(rows) == ["results/a.svg", "results/b.csv"]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            "- {paper: he_su, item: Fig. 3, shows: x}\n",
            r"row 2 \(he_su Fig. 3\): give exactly one of outputs .* and not_reproduced",
        ),
        (
            "- {paper: he_su, item: Fig. 3, shows: x, outputs: [results/c.svg], "
            "not_reproduced: y}\n",
            r"row 2 \(he_su Fig. 3\): give exactly one of outputs",
        ),
        (
            "- {paper: vaswani, item: Fig. 3, shows: x, not_reproduced: y}\n",
            r"row 2 \(vaswani Fig. 3\): paper is 'vaswani'; it must be one of he_su, yao_xu, "
            r"aubry",
        ),
        (
            "- {paper: he_su, item: Fig. 1, shows: x, not_reproduced: y}\n",
            r"row 2 \(he_su Fig. 1\): the item is already row 1; merge the two rows",
        ),
        (
            "- {paper: he_su, item: Fig. 3, shows: x, outputs: [law.svg]}\n",
            r"row 2 \(he_su Fig. 3\): output 'law.svg' is not a path under results/",
        ),
        (
            "- {paper: he_su, item: Fig. 3, shows: x, output: [results/c.svg]}\n",
            r"row 2 \(he_su Fig. 3\): unknown key output",
        ),
        ("- {paper: he_su, item: Fig. 3, not_reproduced: y}\n", r"row 2 .*: shows must be"),
    ],
    ids=["neither", "both", "unknown paper", "duplicate", "not under results", "typo", "no shows"],
)
def test_a_bad_row_is_an_error_naming_it(tmp_path, row, message):
    first = "- {paper: he_su, item: Fig. 1, shows: the law, outputs: [results/a.svg]}\n"
    with pytest.raises(LayerlawsError, match=message):
        read_index(write_index(tmp_path, first + row))


def test_a_file_that_is_not_an_index_is_an_error(tmp_path):
    with pytest.raises(LayerlawsError, match="not found"):
        read_index(tmp_path / "absent.yaml")
    for text, message in (
        ("figures: []\n", "the file is a non-empty list of rows"),
        ("[]\n", "the file is a non-empty list of rows"),
        ("- [paper, he_su]\n", "row 1: a row is a mapping"),
    ):
        with pytest.raises(LayerlawsError, match=message):
            read_index(write_index(tmp_path, text))
    with pytest.raises(LayerlawsError, match="not valid YAML"):
        read_index(write_index(tmp_path, "- {paper: he_su\n"))


def test_made_outputs_counts_the_rows_whose_every_output_exists(tmp_path):
    rows = read_index(write_index(tmp_path, GOOD))
    folder = tmp_path / "rehearsal"
    assert made_outputs(rows, folder) == (0, 2)
    assert missing_outputs(rows, folder) == ["results/a.svg", "results/b.csv"]
    (folder / "results").mkdir(parents=True)
    (folder / "results" / "b.csv").write_text("x\n")
    assert made_outputs(rows, folder) == (1, 2)
    assert missing_outputs(rows, folder) == ["results/a.svg"]
    (folder / "results" / "a.svg").write_text("<svg/>")
    assert made_outputs(rows, folder) == (2, 2)
    assert missing_outputs(rows, folder) == []


def test_the_page_renders_a_table_per_paper(tmp_path):
    page = render(read_index(write_index(tmp_path, GOOD)), GOOD_PLANS)
    assert (
        "| Fig. 1 | the law | `.venv/bin/snakemake results/a.svg results/b.csv --configfile "
        "configs/paper.yaml --cores 8 --resources gpu=2` | 12 | 1,234.6 |\n"
        "| Fig. 2 | views | `.venv/bin/snakemake results/b.csv --configfile configs/paper.yaml "
        "--cores 8 --resources gpu=2`<br>Note: one \\| two | 5 | 0.0 |\n" in page
    )
    assert "| Fig. 2 | a schematic | not reproduced: no data | | |\n" in page
    assert "He & Su 2 of 2; Yao & Xu 0 of 0; Aubry et al. 0 of 1." in page
    assert "The whole config\n(its rule all): 1,363 jobs, 312 of them model jobs, 2,804.3" in page


def test_a_snapshot_that_is_not_the_index_s_is_an_error(tmp_path):
    """A row whose outputs changed, a row added or removed, or a config with other
    settings: the page is not rendered from the snapshot, and the error says what to run;
    a comment in the config changes nothing."""
    rows = read_index(write_index(tmp_path, GOOD))
    changed = GOOD.replace("[results/b.csv], note", "[results/c.csv], note")
    with pytest.raises(LayerlawsError, match=r"no plan of the outputs of he_su Fig. 2: .*--write"):
        render(read_index(write_index(tmp_path, changed)), GOOD_PLANS)
    with pytest.raises(LayerlawsError, match="plans outputs that no row names: it is stale"):
        render(rows[:1], GOOD_PLANS)
    config = tmp_path / "paper.yaml"
    written = (REPO / CONFIG).read_text()
    config.write_text("# a comment\n" + written)
    assert read_snapshot(SNAPSHOT, config).whole.jobs > 1000
    settings = yaml.safe_load(written)
    settings["datasets"]["bookcorpus"]["n_samples"] += 1
    config.write_text(yaml.safe_dump(settings))
    with pytest.raises(LayerlawsError, match=r"planned from other settings .* --write-snapshot"):
        read_snapshot(SNAPSHOT, config)
    with pytest.raises(LayerlawsError, match="not found; write it"):
        read_snapshot(tmp_path / "absent.json", config)


def test_the_page_is_current_and_written_by_the_command(tmp_path):
    expected = render(read_index(INDEX), read_snapshot(SNAPSHOT, REPO / CONFIG))
    assert PAGE.read_text() == expected, (
        "docs/figures.md is stale: python -m layerlaws.pipeline.figure_index "
        "configs/paper_figures.yaml docs/figures.md"
    )
    main([str(INDEX), str(tmp_path / "figures.md")])
    assert (tmp_path / "figures.md").read_text() == expected
    with pytest.raises(SystemExit, match="usage"):
        main([str(INDEX)])


def page_command(paper: str, item: str) -> str:
    """The command of a row of docs/figures.md, as the page prints it."""
    title = {"he_su": "He & Su", "aubry": "Aubry et al."}[paper]
    section = PAGE.read_text().split(f"## {title}: ", 1)[1].split("\n## ", 1)[0]
    return re.search(rf"^\| {re.escape(item)} \|[^`]*`([^`]+)`", section, re.M)[1]


def test_a_row_s_command_from_the_page_runs_as_written():
    """The command of He & Su's Fig. 2, word for word from the page with -n added, run
    from the repository root by the suite's own Snakemake: a dry run that lists the pass
    the figure needs (with the targets after --configfile, Snakemake reads them as config
    files and fails)."""
    words = shlex.split(page_command("he_su", "Fig. 2"))
    assert words[0] == ".venv/bin/snakemake"
    program = str(Path(sys.executable).with_name("snakemake"))
    ran = subprocess.run(
        [program, *words[1:], "-n"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-3000:]
    jobs = {(job.rule, job.wildcards) for job in listed_jobs(ran.stdout)}
    pass_job = ("equilearning_pass", (("dataset", "medrag-textbooks"), ("model", "gpt1")))
    assert pass_job in jobs and ("plot_equilearning", pass_job[1]) in jobs


def paper_plan(tmp_path) -> list[dict]:
    """The planner's rows of the paper config before anything runs (what snakemake estimate
    prints)."""
    config = yaml.safe_load((REPO / CONFIG).read_text())
    validate(config, str(SCHEMA_FILE))
    return JobPlanner.from_config(config, Layout(str(tmp_path / "results"))).plan()


def gpu_hours(rows: list[dict]) -> float:
    """GPUs × planned minutes / 60 of plan rows, summed."""
    return sum(row["gpu"] * row["runtime"] for row in rows) / 60


def test_the_plans_are_the_estimate_s_jobs(tmp_path):
    """The snapshot's whole config is every job that snakemake estimate plans, with its
    GPU-hours (its own gpu_hours_line over the planner's rows, every job there on a GPU);
    no row plans more than the whole; He & Su's Fig. 1 needs every equi-learning pass (for
    summary.csv), its GPU-hours the sum of GPUs × minutes / 60 of the plan's passes."""
    rows = paper_plan(tmp_path)
    plans = read_snapshot(SNAPSHOT, REPO / CONFIG)
    estimate = re.match(r"gpu_hours=([\d,.]+) ", gpu_hours_line(rows, 1))[1]
    assert all(row["gpu"] >= 1 for row in rows)
    assert plans.whole.model_jobs == len(rows) > 300
    np.testing.assert_allclose(plans.whole.gpu_hours, float(estimate.replace(",", "")), atol=0.05)
    for plan in plans.by_outputs.values():
        assert plan.jobs <= plans.whole.jobs and plan.model_jobs <= plans.whole.model_jobs
        assert 0 <= plan.gpu_hours <= plans.whole.gpu_hours
    fig1 = next(row for row in read_index(INDEX) if (row.paper, row.item) == ("he_su", "Fig. 1"))
    passes = [row for row in rows if row["job"] == "equilearning_pass"]
    he_su = plans.by_outputs[fig1.outputs]
    assert he_su.model_jobs == len(passes) > 100
    np.testing.assert_allclose(he_su.gpu_hours, gpu_hours(passes), atol=5e-4)  # stored to 1/1000


RECIPE_DRY_RUN = re.compile(
    r"```sh\n\s*(\.venv/bin/snakemake [^\n]+ -n)\n\s*```\n\n\s*([\d,]+) jobs, ([\d,.]+) "
    r"planned GPU-hours"
)
"""A dry run of the figure recipe: its command, then its jobs and GPU-hours."""


def test_the_figure_recipe_quotes_the_plans_of_its_dry_runs(tmp_path):
    """He & Su's Fig. 1: its row's command with -n, the row's jobs and GPU-hours. Aubry et
    al.'s Fig. 1b: two outputs of its Fig. 1 row with the same options, planned here (a dry
    run): its GPU-hours, against the plan's own rows, are those of the 26 coupling jobs of
    the two Pythia trainings' checkpoints. The whole config's GPU-hours."""
    recipe = RECIPES.read_text().split("\n## ")[1]
    assert recipe.startswith("Reproduce one figure of a paper\n")
    plans = read_snapshot(SNAPSHOT, REPO / CONFIG)
    assert f"{plans.whole.gpu_hours:,.1f} GPU-hours" in recipe
    quoted = [
        (shlex.split(command), int(jobs.replace(",", "")), float(hours.replace(",", "")))
        for command, jobs, hours in RECIPE_DRY_RUN.findall(recipe)
    ]
    assert len(quoted) == 2, quoted
    (he_su, *he_su_plan), (aubry, *aubry_plan) = quoted
    assert he_su == [*shlex.split(page_command("he_su", "Fig. 1")), "-n"]
    he_su_targets = tuple(word for word in he_su if word.startswith("results/"))
    plan = plans.by_outputs[he_su_targets]
    assert he_su_plan == [plan.jobs, round(plan.gpu_hours, 1)]
    targets = [word for word in aubry if word.startswith("results/")]
    assert set(targets) < set(shlex.split(page_command("aubry", "Fig. 1")))
    assert [word for word in aubry if word not in targets] == [
        word for word in he_su if word not in he_su_targets
    ]
    plan = target_plans([targets], REPO / CONFIG)[tuple(targets)]
    pythia = [
        row
        for row in paper_plan(tmp_path)
        if row["job"] == "measure_coupling"
        and re.fullmatch(r"pythia-(6\.9b|12b)-training@step\d+", row["model"])
    ]
    assert plan.model_jobs == len(pythia) == 26
    np.testing.assert_allclose(plan.gpu_hours, gpu_hours(pythia), rtol=1e-6)
    assert aubry_plan == [plan.jobs, round(plan.gpu_hours, 1)]


def test_the_index_module_imports_no_torch():
    assert_torch_free(["layerlaws.pipeline.figure_index"])
