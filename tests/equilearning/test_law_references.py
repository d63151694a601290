"""Independent references for the law tables of a real Snakemake run (He & Su §1, Fig. S8):
``law.csv`` and ``fuzziness_law.csv`` against ``scipy.stats.linregress`` of the log of
``pr.csv`` and ``fuzziness.csv`` over layers 1…L, and ``fuzziness.csv`` itself against
Tr(SS_w SS_b⁺) computed with NumPy from the hidden states the same pass kept.

Nothing of layerlaws computes a reference: the kept states are read with ``numpy.load``
from their shards, the norms (a default-initialised RMSNorm or LayerNorm with the model's
eps, standardisation) and the classes (every next token, ``equilearning.fuzziness.classes:
all`` as He & Su's released code) are written here from the definitions. The largest
difference seen is in each assertion message.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from differences import Differences
from scipy import stats

pytestmark = pytest.mark.slow

MODELS = ["tiny-llama", "tiny-gpt2"]
PINV_RCOND = 1e-10
"""Relative cut-off of the pseudo-inverse of SS_b: its null eigenvalues (a LayerNorm's
centring) are ~1e-16 of the largest, its others far above."""


def run_folder(finished: Path, model: str) -> Path:
    return finished / "results/equilearning" / model / "mini"


def log_linear_fit(layers: np.ndarray, values: np.ndarray) -> dict[str, float]:
    """scipy's least-squares line of log value against layer: the law's columns."""
    order = np.argsort(layers)
    layers, values = layers[order], values[order]
    fit = stats.linregress(layers, np.log(values))
    return {
        "slope": fit.slope,
        "intercept": fit.intercept,
        "rho": np.exp(fit.slope),
        "pearson": fit.rvalue,
        "first": values[0],
        "last": values[-1],
        "overall_decay": values[-1] / values[0],
    }


def compare_fits(table: pl.DataFrame, source: pl.DataFrame, keys: list[str], value: str, name: str):
    """Every row of a law table against ``log_linear_fit`` of its block of ``source``
    (layers ≥ 1); asserts each within 1e-9 and returns the max |diff| per column."""
    renamed = {"first": f"{name}_first", "last": f"{name}_last"}
    differences = Differences()
    blocks = source.filter(pl.col("layer") >= 1).partition_by(keys, as_dict=True)
    assert len(table) == len(blocks)
    for row in table.iter_rows(named=True):
        block = blocks[tuple(row[key] for key in keys)]
        expected = log_linear_fit(block["layer"].to_numpy(), block[value].to_numpy())
        for column, reference in expected.items():
            column = renamed.get(column, column)
            differences.add(column, row[column], reference)
    return differences.check(name, atol=1e-9)


@pytest.mark.parametrize("model", MODELS)
def test_law_is_scipy_linregress_of_log_pr(finished, model):
    """law.csv, every (offset, norm, control): slope, intercept, ρ = exp(slope), Pearson
    r, PR at layers 1 and L and their ratio."""
    folder = run_folder(finished, model)
    message = compare_fits(
        pl.read_csv(folder / "law.csv"),
        pl.read_csv(folder / "pr.csv"),
        ["offset", "norm", "control"],
        "pr",
        "pr",
    )
    print(f"{model} law.csv: {message}")


@pytest.mark.parametrize("model", MODELS)
def test_fuzziness_law_is_scipy_linregress_of_log_fuzziness(finished, model):
    folder = run_folder(finished, model)
    message = compare_fits(
        pl.read_csv(folder / "fuzziness_law.csv"),
        pl.read_csv(folder / "fuzziness.csv"),
        ["norm"],
        "fuzziness",
        "fuzziness",
    )
    print(f"{model} fuzziness_law.csv: {message}")


def next_token_classes(tokens: pl.DataFrame) -> list[int]:
    """Every id that follows a text token of its sequence as its next text token."""
    text = {(s, p): t for s, p, t, special in tokens.iter_rows() if not special}
    return sorted({text[(s, p + 1)] for s, p in text if (s, p + 1) in text})


def kept_layer(folder: Path, layer: int) -> np.ndarray:
    """The kept states of ``layer`` (rows, hidden) float64, from its float32 shards."""
    shards = sorted((folder / f"layer_{layer:03d}").glob("shard_*.npy"))
    return np.concatenate([np.load(shard) for shard in shards]).astype(np.float64)


def normalised(x: np.ndarray, norm: str, facts: dict) -> np.ndarray:
    """He & Su's norms of each row: ``model`` a weight-1 (bias-0) norm of the model's own
    type with its eps (none for a post-LN model), ``standardize`` (x − mean) / std,
    ``none`` the row itself."""
    if norm == "none" or (norm == "model" and facts["post_ln"]):
        return x
    centred = x - x.mean(axis=1, keepdims=True)
    if norm == "standardize":
        return centred / centred.std(axis=1, keepdims=True)
    if facts["norm_type"] == "rmsnorm":
        return x / np.sqrt((x**2).mean(axis=1, keepdims=True) + facts["norm_eps"])
    return centred / np.sqrt(centred.var(axis=1, keepdims=True) + facts["norm_eps"])


def separation_fuzziness(rows: np.ndarray, labels: np.ndarray) -> float:
    """D = Tr(SS_w SS_b⁺), SS_w = (1/N) Σ_c Σ_{i∈c} (h_i − μ_c)(h_i − μ_c)ᵀ, SS_b = (1/N)
    Σ_c n_c (μ_c − μ)(μ_c − μ)ᵀ."""
    n, mean = len(rows), rows.mean(axis=0)
    within = np.zeros((rows.shape[1],) * 2)
    between = np.zeros_like(within)
    for label in np.unique(labels):
        members = rows[labels == label]
        centre = members.mean(axis=0)
        within += (members - centre).T @ (members - centre) / n
        between += len(members) * np.outer(centre - mean, centre - mean) / n
    return float(np.trace(within @ np.linalg.pinv(between, rcond=PINV_RCOND, hermitian=True)))


@pytest.mark.parametrize("model", MODELS)
def test_fuzziness_is_the_trace_on_the_kept_states(finished, model):
    """fuzziness.csv, every layer and norm (layer L as the model outputs it), n_classes
    and n_rows: the rows are the kept text tokens whose next token in the sequence is a
    class."""
    results = finished / "results"
    hidden = results / "hidden" / model / "mini"
    facts = json.loads((results / "models" / model / "layerlaws_model.json").read_text())
    tokens = pl.read_parquet(
        results / "tokens" / model / "mini.parquet",
        columns=["sentence_id", "position", "token_id", "is_special"],
    )
    classes = next_token_classes(tokens)
    text = {(s, p): t for s, p, t, special in tokens.iter_rows() if not special}
    rows = pl.read_parquet(hidden / "rows.parquet").sort("row")
    labels = np.array(
        [text.get((s, p + 1), -1) for s, p in rows.select("sentence_id", "position").iter_rows()]
    )
    counted = np.isin(labels, classes)
    table = pl.read_csv(run_folder(finished, model) / "fuzziness.csv")
    assert len(table) == (facts["num_layers"] + 1) * table["norm"].n_unique()
    found, reference = [], []
    for row in table.iter_rows(named=True):
        states = kept_layer(hidden, row["layer"])
        if row["layer"] < facts["num_layers"]:
            states = normalised(states, row["norm"], facts)
        expected = separation_fuzziness(states[counted], labels[counted])
        assert (row["n_classes"], row["n_rows"]) == (len(classes), counted.sum()), row
        found.append(row["fuzziness"])
        reference.append(expected)
    found, reference = np.array(found), np.array(reference)
    assert reference.size > 0 and np.isfinite(reference).all()
    np.testing.assert_allclose(found, reference, rtol=1e-6, atol=0, err_msg=f"{model} fuzziness")
    relative = np.abs(found - reference) / np.abs(reference)
    print(f"{model} fuzziness.csv fuzziness: max relative |diff| {relative.max():.3g}")
