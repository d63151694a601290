"""Independent references for the trajectory tables of a real Snakemake run (Aubry et al.
§3.2–3.3, Figs. 23–25): ``trajectories/tokens.csv`` and ``trajectories/layers.csv`` of the
tiny workflow's coupling run (tiny-llama on the prompts ``few``, trained and random
weights; every prompt's arrays kept, ``coupling.keep_arrays: all``) recomputed with NumPy
from ``streams.npz``, the residual streams x^0 … x^L of every token that the same job
wrote.

Nothing of layerlaws computes a reference; each quantity is written from the paper:
- LSS = L / ‖x̃^L − x̃^0‖, x̃^0 = x^0, x̃^l = x̃^{l−1} + (x^l − x^{l−1}) / ‖x^l − x^{l−1}‖
  (Eq. 15, by its recursion);
- ED = Var_l α^l / (Avg_l α^l)², α^l = ln(‖x^l‖ / ‖x^{l−1}‖), l = 1…L (population
  variance over the L layers);
- equidistance CV = Std_l / Avg_l of the step lengths ‖x^l − x^{l−1}‖ (population std);
- the windowed LSS at block l: the LSS of the sub-trajectory of blocks l − h … l + h cut
  to 1…L, h = ⌊w/2⌋ for ``coupling.lss_window`` w (w = 11 in the paper: five blocks on each
  side).
Rows with a ``metric`` column are compared where it is ``paper``. The largest difference
seen is in each assertion message.
"""

from __future__ import annotations

import itertools

import numpy as np
import polars as pl
import pytest
from differences import Differences

pytestmark = pytest.mark.slow

LSS_WINDOW = 2
"""``coupling.lss_window`` of the tiny workflow (conftest.base_config)."""
TOLERANCE = 1e-9
"""Streams are float32 in both computations, then float64: only summation order differs."""


def paper_rows(table: pl.DataFrame) -> pl.DataFrame:
    """The rows of the paper's metric when the table has a ``metric`` column."""
    return table.filter(pl.col("metric") == "paper") if "metric" in table.columns else table


def line_shape_score(points: np.ndarray) -> float:
    """LSS of points (n + 1, d) by the recursion of x̃: n / ‖x̃^n − x̃^0‖."""
    walked = points[0].copy()
    for before, after in itertools.pairwise(points):
        walked = walked + (after - before) / np.linalg.norm(after - before)
    return (len(points) - 1) / np.linalg.norm(walked - points[0])


def expodistance(points: np.ndarray) -> float:
    alphas = np.array(
        [
            np.log(np.linalg.norm(points[layer]) / np.linalg.norm(points[layer - 1]))
            for layer in range(1, len(points))
        ]
    )
    return np.mean((alphas - alphas.mean()) ** 2) / alphas.mean() ** 2


def steps(points: np.ndarray) -> np.ndarray:
    return np.array(
        [np.linalg.norm(points[layer] - points[layer - 1]) for layer in range(1, len(points))]
    )


def equidistance_cv(points: np.ndarray) -> float:
    lengths = steps(points)
    return np.sqrt(np.mean((lengths - lengths.mean()) ** 2)) / lengths.mean()


def window_score(points: np.ndarray, block: int, width: int) -> float:
    """LSS of blocks block − ⌊width/2⌋ … block + ⌊width/2⌋ (cut to 1…L): the points
    x^{first − 1} … x^{last}."""
    layers = len(points) - 1
    first, last = max(block - width // 2, 1), min(block + width // 2, layers)
    return line_shape_score(points[first - 1 : last + 1])


@pytest.fixture(scope="module")
def trajectories(every_array):
    folder = every_array / "results/coupling/tiny-llama/few/trajectories"
    with np.load(folder / "streams.npz") as npz:
        streams = {key: npz[key].astype(np.float64) for key in npz.files}
    read = {"schema_overrides": {"prompt": pl.String}}
    return (
        streams,
        paper_rows(pl.read_csv(folder / "tokens.csv", **read)),
        paper_rows(pl.read_csv(folder / "layers.csv", **read)),
    )


def test_token_scores_follow_the_paper_definitions(trajectories):
    """tokens.csv: lss, expodistance, equidistance_cv of every token of every prompt
    under both weights."""
    streams, tokens, _ = trajectories
    assert len(tokens) == sum(stream.shape[1] for stream in streams.values())
    assert set(tokens["weights"]) == {"trained", "random"}
    references = {
        "lss": line_shape_score,
        "expodistance": expodistance,
        "equidistance_cv": equidistance_cv,
    }
    differences = Differences()
    for row in tokens.iter_rows(named=True):
        points = streams[f"{row['weights']}/{row['prompt']}"][:, row["token"]]
        for column, reference in references.items():
            differences.add(column, row[column], reference(points))
    print(differences.check("trajectories/tokens.csv", rtol=TOLERANCE))


def test_layer_rows_follow_the_paper_definitions(trajectories):
    """layers.csv: norm ‖x^l‖ at every layer 0…L; step length ‖x^l − x^{l−1}‖ and the
    windowed LSS at layers 1…L, NaN at layer 0."""
    streams, _, layers = trajectories
    differences = Differences()
    for row in layers.iter_rows(named=True):
        points = streams[f"{row['weights']}/{row['prompt']}"][:, row["token"]]
        layer = row["layer"]
        expected = {"norm": np.linalg.norm(points[layer])}
        if layer == 0:
            assert np.isnan(row["step_length"]) and np.isnan(row["lss_window"]), row
        else:
            expected["step_length"] = steps(points)[layer - 1]
            expected["lss_window"] = window_score(points, layer, LSS_WINDOW)
        for column, value in expected.items():
            differences.add(column, row[column], value)
    assert len(layers) == sum(stream.shape[0] * stream.shape[1] for stream in streams.values())
    print(differences.check("trajectories/layers.csv", rtol=TOLERANCE))
