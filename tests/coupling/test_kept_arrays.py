"""``coupling.keep_arrays`` through real Snakemake runs of the tiny workflow's coupling
(tiny-llama on the prompts ``few``: the paper's prompt and one drawn, every prompt's
Jacobians measured): by default the arrays and token-wise rows of the figures' prompt
alone (the first), with ``all`` every prompt's; the other tables the same rows either way,
the token-wise statistics those of every prompt's rows, and every figure made. (A count,
with shards and resume, is run in ``test_coupling_resume``.)"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from layerlaws.coupling.workflow import COUPLING_FIGURES, TRAJECTORY_FIGURES

pytestmark = pytest.mark.slow

COUPLING = "results/coupling/tiny-llama/few"
TABLES = (
    "depth.csv",
    "singular_values.csv",
    "token_means.csv",
    "prompts.csv",
    "trajectories/tokens.csv",
    "trajectories/layers.csv",
)
WEIGHTS = ("trained", "random")


def arrays(workdir, name: str) -> dict[str, np.ndarray]:
    with np.load(workdir / COUPLING / name) as archive:
        return dict(archive)


@pytest.mark.parametrize("table", TABLES)
def test_every_prompts_rows_are_written_whatever_arrays_are_kept(finished, every_array, table):
    kept, every = (
        pl.read_csv(root / COUPLING / table, infer_schema=False) for root in (finished, every_array)
    )
    assert set(kept["prompt"]) - {"mean"} == {"0", "1"}
    assert kept.equals(every), table


def tokens(workdir) -> pl.DataFrame:
    return pl.read_csv(workdir / COUPLING / "tokens.csv", schema_overrides={"prompt": pl.String})


def test_the_default_keeps_the_token_wise_rows_of_the_figures_prompt(finished, every_array):
    kept, every = tokens(finished), tokens(every_array)
    assert set(every["prompt"]) == {"0", "1"}
    assert kept.equals(every.filter(pl.col("prompt") == "0"))


def test_the_token_wise_statistics_are_those_of_every_prompts_rows(finished, every_array):
    """token_means.csv (written from each prompt's rows as it is measured) against the
    mean over the distinct pairs of the rows ``all`` keeps, grouped here."""
    key = ["weights", "prompt", "layer_a", "layer_b", "kind", "k", "metric"]
    rows = tokens(every_array)
    expected = (
        rows.filter(pl.col("token_a") != pl.col("token_b"))
        .group_by(key)
        .agg(pairs=pl.len(), miscoupling=pl.col("miscoupling").mean())
        .sort(key)
    )
    means = pl.read_csv(
        finished / COUPLING / "token_means.csv", schema_overrides={"prompt": pl.String}
    ).sort(key)
    assert means.height > 0 and means.select(key).equals(expected.select(key))
    assert means["pairs"].to_list() == expected["pairs"].to_list()
    # float64 means of at most T² float values, printed in full: equal to rounding.
    np.testing.assert_allclose(means["miscoupling"], expected["miscoupling"], rtol=1e-12)


def test_the_default_keeps_the_arrays_of_the_figures_prompt(finished, every_array):
    """Streams, factors and coupling matrices of prompt 0 under both weights, equal to
    those of the run that keeps every prompt's; the mean |A| over both prompts."""
    expected = {
        "trajectories/streams.npz": {f"{w}/{p}" for w in WEIGHTS for p in (0, 1)},
        "factors.npz": {f"{w}/{p}/{f}" for w in WEIGHTS for p in (0, 1) for f in "usv"},
        "couplings.npz": {"k", "token_layers"}
        | {f"depth/{w}/{p}" for w in WEIGHTS for p in (0, 1, "mean_abs")}
        | {f"tokens/{w}/0" for w in WEIGHTS},
    }
    for name, keys in expected.items():
        kept, every = arrays(finished, name), arrays(every_array, name)
        assert set(every) == keys, name
        assert set(kept) == {key for key in keys if "/1" not in key}, name
        for key, array in kept.items():
            np.testing.assert_array_equal(array, every[key], err_msg=f"{name} {key}")


def test_the_figures_are_made_from_the_kept_arrays(finished):
    folder = finished / COUPLING
    figures = [folder / f"{name}.svg" for name in COUPLING_FIGURES] + [
        folder / "trajectories" / f"{name}.svg" for name in TRAJECTORY_FIGURES
    ]
    assert all(path.stat().st_size > 1000 for path in figures)
