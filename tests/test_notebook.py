"""The first-day notebook (docs/first-day.ipynb) runs from start to end on the default
config's model, as a reader runs it, and is stored without outputs (so that what a reader
sees is what it computes now, not what it once printed)."""

from __future__ import annotations

import json
import math

import nbformat
import pytest
from nbclient import NotebookClient
from snakemake_runs import REPO

pytestmark = pytest.mark.slow

NOTEBOOK = REPO / "docs" / "first-day.ipynb"


def test_the_notebook_is_stored_without_outputs():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(not cell.outputs and cell.execution_count is None for cell in code)


def test_the_first_day_notebook_runs(tmp_path):
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}
    ).execute()
    outputs = [
        output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
    ]
    assert not [output for output in outputs if output.output_type == "error"]
    # The law's fit is a table, the coupling of neighbouring blocks two means in [0, 1], the
    # trained weights' lower, and the figure an image.
    shown = [output.get("data", {}) for output in outputs]
    assert any("pearson" in data.get("text/html", "") for data in shown)
    neighbours = next(
        data["text/plain"] for data in shown if data.get("text/plain", "").startswith("{'trained'")
    )
    values = json.loads(neighbours.replace("'", '"'))
    assert set(values) == {"trained", "random"}
    assert all(math.isfinite(value) and 0 <= value <= 1 for value in values.values())
    assert values["trained"] < values["random"]  # Aubry et al.: trained blocks are coupled
    assert any("image/png" in data for data in shown)
