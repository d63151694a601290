"""One table per series (``results/series/{series}/summary.csv``): every member × probing
dataset with its x, and the quantities the three papers compare across models; and the
least-squares fits of generalisation against coupling (Aubry et al., Fig. 1a).

Columns (absent stages leave theirs out):
- ``model``, ``x``, ``dataset`` (null when the series has no probing datasets),
  ``parameters``, ``num_layers``, ``hidden_size``, and for training checkpoints ``step`` and
  ``tokens_seen``;
- the law for the next token (offset +1) under norm ``norm`` without control: ``rho``,
  ``pearson``, ``pr_first``, ``pr_last``, ``overall_decay``;
- held-out ``loss`` (nats), ``perplexity``, ``accuracy``;
- coupling of the trained weights, per K: ``miscoupling_all_k{K}``, the paper's aggregate
  (§5.4: m̃ of the last token's Jacobians averaged over all layer pairs l, l′, diagonal
  included, and over prompts) and ``miscoupling_offdiagonal_k{K}`` (pairs l ≠ l′ only);
  the same of every other chosen coupling metric (``coupling.metrics``) with the metric as
  a suffix, ``miscoupling_all_k{K}_{metric}``, ``miscoupling_offdiagonal_k{K}_{metric}``;
- ``lss_median``, ``expodistance_median``, ``equidistance_cv_median`` of the trained
  weights' token trajectories;
- ``rcos_we_next`` = R_cos(W_E, φ_next), ``rcos_wu_pre`` = R_cos(W_U, φ_pre);
- ``score_<name>`` for every external score of the model.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from scipy import stats

from layerlaws.equilearning.law import NEXT_TOKEN

LAW_COLUMNS = ("rho", "pearson", "pr_first", "pr_last", "overall_decay")
EVALUATION_COLUMNS = ("loss", "perplexity", "accuracy")


def law_columns(path: str, norm: str) -> dict[str, float]:
    """The next-token law of a ``law.csv`` under ``norm``, no control."""
    law = pl.read_csv(path).filter(
        (pl.col("offset") == NEXT_TOKEN) & (pl.col("norm") == norm) & (pl.col("control") == "none")
    )
    return {column: float(law[column][0]) for column in LAW_COLUMNS}


def evaluation_columns(path: str) -> dict[str, float]:
    table = pl.read_csv(path)
    return {column: float(table[column][0]) for column in EVALUATION_COLUMNS}


PAPER_METRIC = "paper"
"""The ``metric`` of Aubry et al.'s m̃ (Eq. 14) in ``depth.csv``; its summary columns
carry no suffix."""


def coupling_column(kind: str, k: int, metric: str) -> str:
    """The summary column of a coupling aggregate: ``miscoupling_{kind}_k{K}`` for the
    paper's metric, ``miscoupling_{kind}_k{K}_{metric}`` for another (``kind``: ``all`` or
    ``offdiagonal``)."""
    name = f"miscoupling_{kind}_k{k}"
    return name if metric == PAPER_METRIC else f"{name}_{metric}"


def coupling_column_parts(column: str) -> tuple[str, int, str]:
    """(kind, K, metric) of a column named by ``coupling_column``."""
    kind, rest = column.removeprefix("miscoupling_").split("_k", 1)
    k, _, metric = rest.partition("_")
    return kind, int(k), metric or PAPER_METRIC


def coupling_columns(path: str) -> dict[str, float]:
    """The depth-wise coupling of the trained weights per metric and K (``depth.csv``; a
    table without a ``metric`` column holds the paper's), over all layer pairs and over the
    pairs off the diagonal, both averaged over prompts."""
    depth = pl.read_csv(path, schema_overrides={"prompt": pl.String}).filter(
        (pl.col("weights") == "trained") & (pl.col("prompt") == "mean")
    )
    if "metric" not in depth.columns:
        depth = depth.with_columns(metric=pl.lit(PAPER_METRIC))
    columns = {}
    for metric in depth["metric"].unique(maintain_order=True).to_list():
        for k in sorted(depth["k"].unique().to_list()):
            block = depth.filter((pl.col("k") == k) & (pl.col("metric") == metric))
            off = block.filter(pl.col("layer_a") != pl.col("layer_b"))
            columns[coupling_column("all", k, metric)] = float(block["miscoupling"].mean())
            columns[coupling_column("offdiagonal", k, metric)] = float(off["miscoupling"].mean())
    return columns


def trajectory_columns(path: str) -> dict[str, float]:
    tokens = pl.read_csv(path, schema_overrides={"prompt": pl.String}).filter(
        pl.col("weights") == "trained"
    )
    return {
        "lss_median": float(tokens["lss"].median()),
        "expodistance_median": float(tokens["expodistance"].median()),
        "equidistance_cv_median": float(tokens["equidistance_cv"].median()),
    }


def signature_columns(path: str) -> dict[str, float]:
    rcos = pl.read_csv(path)

    def pick(matrix: str, signature: str) -> float:
        row = rcos.filter((pl.col("matrix") == matrix) & (pl.col("signature") == signature))
        return float(row["r_cos"][0])

    return {"rcos_we_next": pick("W_E", "next"), "rcos_wu_pre": pick("W_U", "pre")}


def model_columns(facts_path: str) -> dict[str, Any]:
    """Size from a prepared model's facts, step and tokens seen of a checkpoint."""
    facts = json.loads(Path(facts_path).read_text())
    columns: dict[str, Any] = {
        "parameters": facts["parameters"],
        "num_layers": facts["num_layers"],
        "hidden_size": facts["hidden_size"],
    }
    for key in ("step", "tokens_seen"):
        if key in facts["source"]:
            columns[key] = facts["source"][key]
    return columns


def series_summary(members: Sequence[Mapping[str, Any]], x_kind: str, norm: str) -> pl.DataFrame:
    """The summary of a series from its members' outputs. Each member is a mapping:
    ``model``, ``x`` (None for ``parameters``: read from the facts), ``facts`` (path of
    ``layerlaws_model.json``), ``scores``, ``law`` and ``evaluation`` ({dataset: path}),
    and ``depth``, ``trajectories``, ``rcos`` (a path or None)."""
    rows = []
    for member in members:
        facts = model_columns(member["facts"])
        scores = {f"score_{name}": float(value) for name, value in member["scores"].items()}
        x = facts["parameters"] if x_kind == "parameters" else member["x"]
        measured: dict[str, Any] = {}
        for name, reader in (
            ("depth", coupling_columns),
            ("trajectories", trajectory_columns),
            ("rcos", signature_columns),
        ):
            if member[name] is not None:
                measured |= reader(member[name])
        for dataset in list(member["law"]) or [None]:
            row = {"model": member["model"], "x": x, "dataset": dataset} | facts
            if dataset is not None:
                row |= law_columns(member["law"][dataset], norm)
                row |= evaluation_columns(member["evaluation"][dataset])
            rows.append(row | measured | scores)
    return pl.DataFrame(rows, infer_schema_length=None)


def linear_fit(x: Sequence[float], y: Sequence[float]) -> dict[str, float]:
    """Least squares y = intercept + slope · x: slope, intercept, R², the two-sided
    p-value of slope = 0 (t-test with n − 2 degrees of freedom), n. Float64."""
    xs, ys = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    n = len(xs)
    dx, dy = xs - xs.mean(), ys - ys.mean()
    sxx, syy, sxy = float(dx @ dx), float(dy @ dy), float(dx @ dy)
    slope = sxy / sxx
    r = sxy / math.sqrt(sxx * syy) if syy > 0 else 0.0
    r = max(-1.0, min(1.0, r))
    if n > 2 and abs(r) < 1:
        t = r * math.sqrt((n - 2) / (1 - r * r))
        p_value = float(2 * stats.t.sf(abs(t), n - 2))
    else:
        p_value = 0.0 if n > 2 else float("nan")
    return {
        "slope": slope,
        "intercept": float(ys.mean() - slope * xs.mean()),
        "r2": r * r,
        "p_value": p_value,
        "n": n,
    }


def coupling_fits(summary: pl.DataFrame) -> pl.DataFrame:
    """Generalisation against coupling, as Aubry et al.'s Fig. 1a: for every metric and K,
    coupling (= −``miscoupling_all_k{K}[_{metric}]``) as x, and as y each external score (one
    point per model) and the held-out loss on each dataset. Needs three models with both
    numbers. Rows: ``coupling`` (the x's name, ``coupling_k{K}[_{metric}]``), ``k``,
    ``metric``, ``generalisation``, ``dataset``, and the fit."""
    couplings = [c for c in summary.columns if c.startswith("miscoupling_all_k")]
    measures = [(c, None) for c in summary.columns if c.startswith("score_")]
    if "loss" in summary.columns:
        measures += [("loss", d) for d in summary["dataset"].unique(maintain_order=True)]
    rows = []
    for coupling in couplings:
        _, k, metric = coupling_column_parts(coupling)
        for measure, dataset in measures:
            points = summary if dataset is None else summary.filter(pl.col("dataset") == dataset)
            points = (
                points.unique("model", keep="first", maintain_order=True)
                .select(coupling, measure)
                .drop_nulls()
            )
            if len(points) < 3 or points[coupling].n_unique() < 2:
                continue
            fit = linear_fit(-points[coupling].to_numpy(), points[measure].to_numpy())
            rows.append(
                {
                    "coupling": coupling.replace("miscoupling_all", "coupling"),
                    "k": k,
                    "metric": metric,
                    "generalisation": measure,
                    "dataset": dataset,
                }
                | fit
            )
    schema = {
        "coupling": pl.String,
        "k": pl.Int64,
        "metric": pl.String,
        "generalisation": pl.String,
        "dataset": pl.String,
        "slope": pl.Float64,
        "intercept": pl.Float64,
        "r2": pl.Float64,
        "p_value": pl.Float64,
        "n": pl.Int64,
    }
    return pl.DataFrame(rows, schema=schema)
