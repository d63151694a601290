"""The papers' figure index (configs/paper_figures.yaml): it holds every figure and table of
the three papers, the paper config makes every output it names (one dry run), a bad row
is a clear error naming it, the rehearsal's count of made figures, and docs/figures.md is
the page it renders."""

from __future__ import annotations

import pytest
import yaml
from snakemake.utils import validate
from snakemake_runs import REPO, snakemake

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.settings import SCHEMA_FILE
from layerlaws.pipeline.expansion import ExpandedConfig
from layerlaws.pipeline.figure_index import (
    CONFIG,
    indexed_outputs,
    made_outputs,
    main,
    missing_outputs,
    read_index,
    render,
)
from layerlaws.pipeline.layout import Layout
from layerlaws.pipeline.targets import Targets
from tests.pipeline.test_torch_free import assert_torch_free

INDEX = REPO / "configs" / "paper_figures.yaml"
PAGE = REPO / "docs" / "figures.md"
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
    page = render(read_index(write_index(tmp_path, GOOD)))
    assert (
        "| Fig. 1 | the law | `snakemake --configfile configs/paper.yaml results/a.svg "
        "results/b.csv` |\n| Fig. 2 | views | `snakemake --configfile configs/paper.yaml "
        "results/b.csv`<br>Note: one \\| two |\n" in page
    )
    assert "| Fig. 2 | a schematic | not reproduced: no data |\n" in page
    assert "He & Su 2 of 2; Yao & Xu 0 of 0; Aubry et al. 0 of 1." in page


def test_the_page_is_current_and_written_by_the_command(tmp_path):
    expected = render(read_index(INDEX))
    assert PAGE.read_text() == expected, (
        "docs/figures.md is stale: python -m layerlaws.pipeline.figure_index "
        "configs/paper_figures.yaml docs/figures.md"
    )
    main([str(INDEX), str(tmp_path / "figures.md")])
    assert (tmp_path / "figures.md").read_text() == expected
    with pytest.raises(SystemExit, match="usage"):
        main([str(INDEX)])


def test_the_index_module_imports_no_torch():
    assert_torch_free(["layerlaws.pipeline.figure_index"])
