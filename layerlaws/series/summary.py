"""One table per series (``results/series/{series}/summary.csv``): every member × probing
dataset with its x, and the quantities the three papers compare across models; and the
least-squares fits of generalisation against coupling (Aubry et al., Fig. 1a), its
exponential fit (Fig. 8) and the fits of the scores against the models' size (§5.4).

Columns (absent stages leave theirs out):
- ``model``, ``x``, ``dataset`` (null when the series has no probing datasets),
  ``in_fits`` (false for a member listed in the series' ``exclude_from_fits``),
  ``probe`` (the member's probing task, ``next_token`` or ``masked_lm``),
  ``parameters``, ``num_layers``, ``hidden_size``, for training checkpoints ``step``
  and ``tokens_seen``, and ``training_tokens`` (the model's ``models.<key>.training_tokens``,
  tokens it was pretrained on; the column only when a member has one);
- the law of the probe's own targets (the next token, offset +1; under masked-LM probing
  the masked token, offset 0, He & Su Fig. 7) under norm ``norm`` without control:
  ``rho``, ``pearson``, ``pr_first``, ``pr_last``, ``overall_decay``;
- held-out ``loss`` (nats per token), ``perplexity``, ``accuracy``, and
  ``bits_per_byte``, ``bits_per_character`` of the same predictions (comparable across
  tokenizers; ``layerlaws.equilearning.evaluation``), with ``tokenizer``, the
  fingerprint of the model's vocabulary;
- coupling of the trained weights, per K: ``miscoupling_all_k{K}``, the paper's aggregate
  (§5.4: m̃ of Eq. 14 of the last token's Jacobians averaged over all layer pairs l, l′,
  diagonal included, and over prompts) and ``miscoupling_offdiagonal_k{K}`` (pairs l ≠ l′
  only); the same of every other chosen coupling metric (``coupling.metrics``) with the
  metric as a suffix, ``miscoupling_all_k{K}_{metric}``,
  ``miscoupling_offdiagonal_k{K}_{metric}`` (``_unnormalised``: m of Eq. 13);
- ``{lss,expodistance,equidistance_cv}_{mean,median}`` over the trained weights' token
  trajectories, and the same of the random twin's with the suffix ``_random`` (for a
  checkpoint, its step-0 weights);
- ``rcos_we_next`` = R_cos(W_E, φ_next), ``rcos_wu_pre`` = R_cos(W_U, φ_pre);
- where the member's runs measure the representation geometry (``equilearning.observers``
  names ``geometry``; ``layerlaws.geometry``), per dataset: ``effective_rank_last``,
  ``alpha_req_last``, ``dataset_entropy_last`` and ``anisotropy_last``, those of the last
  layer L, and ``cka_previous_mean``, the linear CKA of each layer with the previous one
  averaged over layers 1..L (how much a block changes the states, on average);
- ``score_<name>`` for every external score of the model.

The fits (``fits.csv``) take as held-out measure the loss when the members in the fits
share one tokenizer, and bits per byte when their tokenizers differ
(``held_out_measure``): a loss per token is not comparable across tokenizers. Besides
the fits over all members with ``in_fits`` (``subset`` ``all``) it holds the same fits over
each named subset of them (``subset_rows``; Aubry et al. Table 4).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from scipy import optimize, stats

from layerlaws.core.errors import LayerlawsError
from layerlaws.equilearning.law import NEXT_TOKEN
from layerlaws.forward.masking import TARGET_OFFSETS, probe_of
from layerlaws.series.settings import ALL_MEMBERS

LAW_COLUMNS = ("rho", "pearson", "pr_first", "pr_last", "overall_decay")
EVALUATION_COLUMNS = ("loss", "perplexity", "accuracy", "bits_per_byte", "bits_per_character")
GEOMETRY_LAST = ("effective_rank", "alpha_req", "dataset_entropy", "anisotropy")
"""The geometry quantities a summary takes at the last layer (``<name>_last``)."""


def law_columns(path: str, norm: str, offset: int = NEXT_TOKEN) -> dict[str, float]:
    """The law of a ``law.csv`` for the targets at ``offset`` (the probe's own task: +1
    the next token, 0 the masked token of masked-LM probing) under ``norm``, no control."""
    law = pl.read_csv(path).filter(
        (pl.col("offset") == offset) & (pl.col("norm") == norm) & (pl.col("control") == "none")
    )
    return {column: float(law[column][0]) for column in LAW_COLUMNS}


def geometry_columns(folder: str) -> dict[str, float]:
    """The geometry columns of a run (see the module docstring) from its observers' folder
    (``observers/geometry.csv``)."""
    table = pl.read_csv(Path(folder) / "geometry.csv").sort("layer")
    last = table.row(len(table) - 1, named=True)
    columns = {f"{name}_last": float(last[name]) for name in GEOMETRY_LAST}
    previous = table.filter(pl.col("layer") >= 1)["cka_previous"]
    return columns | {"cka_previous_mean": float(previous.mean())}


def evaluation_columns(path: str) -> dict[str, Any]:
    """The measures of an evaluation table (null where it has none) and its tokenizer's
    fingerprint."""
    table = pl.read_csv(path, schema_overrides={"tokenizer": pl.String})
    measures = {column: table[column].cast(pl.Float64)[0] for column in EVALUATION_COLUMNS}
    return measures | {"tokenizer": table["tokenizer"][0]}


PAPER_METRIC = "paper"
"""The ``metric`` of Aubry et al.'s m̃ (Eq. 14) in ``depth.csv``; its summary columns
carry no suffix."""
GENERALISATION_METRIC = "unnormalised"
"""The metric of Aubry et al.'s coupling against generalisation (§5.4, Fig. 1a): m of
Eq. 13, averaged over l, l′ ∈ {1…L}."""
PAIRS = ("all", "offdiagonal")
"""The layer pairs a coupling aggregate averages over (``miscoupling_{pairs}_k{K}``)."""


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


TRAJECTORY_MEASURES = ("lss", "expodistance", "equidistance_cv")
"""Per-token trajectory measures of ``trajectories/tokens.csv`` (Aubry et al. §3.2–3.3)."""
TWIN_SUFFIXES = {"trained": "", "random": "_random"}
"""Column suffix of each ``weights`` of the trajectory table."""


def trajectory_columns(path: str) -> dict[str, float]:
    """Mean and median over all tokens of each trajectory measure (Aubry et al. §5.3 quote
    the mean LSS: 4.25 trained, 6.54 at initialisation), for the trained weights
    (``lss_mean``, ``lss_median``, …) and their random twin (``lss_mean_random``, …)."""
    tokens = pl.read_csv(path, schema_overrides={"prompt": pl.String})
    columns = {}
    for weights, suffix in TWIN_SUFFIXES.items():
        rows = tokens.filter(pl.col("weights") == weights)
        for measure in TRAJECTORY_MEASURES:
            values = rows[measure].cast(pl.Float64)
            columns[f"{measure}_mean{suffix}"] = float(values.mean())
            columns[f"{measure}_median{suffix}"] = float(values.median())
    return columns


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
        "model_type": facts["model_type"],
    }
    for key in ("step", "tokens_seen"):
        if key in facts["source"]:
            columns[key] = facts["source"][key]
    return columns


def excluded_members(models: Sequence[str], exclude_from_fits: Sequence[str]) -> set[str]:
    """The members left out of the fits: those named in ``exclude_from_fits`` by their own
    key (``pythia@step0``) or by the key they were expanded from (``pythia``: all its
    revisions or checkpoints). A name that matches no member is an error."""
    excluded = {
        model for model in models if {model, model.partition("@")[0]} & set(exclude_from_fits)
    }
    unknown = set(exclude_from_fits) - {
        name for model in excluded for name in (model, model.partition("@")[0])
    }
    if unknown:
        raise LayerlawsError(
            f"series exclude_from_fits names {sorted(unknown)}, which are not members of the "
            f"series; its members: {list(models)}"
        )
    return excluded


def series_summary(
    members: Sequence[Mapping[str, Any]],
    x_kind: str,
    norm: str,
    exclude_from_fits: Sequence[str] = (),
) -> pl.DataFrame:
    """The summary of a series from its members' outputs. Each member is a mapping:
    ``model``, ``x`` (None for ``parameters``: read from the facts), ``facts`` (path of
    ``layerlaws_model.json``), ``scores``, ``training_tokens`` (an int, or None or absent
    when unknown), ``law`` and ``evaluation`` ({dataset: path}), ``geometry`` ({dataset:
    the run's observers' folder}; absent when not measured), and ``depth``,
    ``trajectories``, ``rcos`` (a path or None). Members named in ``exclude_from_fits``
    (see ``excluded_members``) have ``in_fits`` false."""
    excluded = excluded_members([member["model"] for member in members], exclude_from_fits)
    rows = []
    for member in members:
        facts = model_columns(member["facts"])
        if member.get("training_tokens") is not None:
            facts["training_tokens"] = member["training_tokens"]
        scores = {f"score_{name}": float(value) for name, value in member["scores"].items()}
        x = facts["parameters"] if x_kind == "parameters" else member["x"]
        probe = probe_of(member.get("probe", "auto"), facts.pop("model_type"))
        measured: dict[str, Any] = {}
        for name, reader in (
            ("depth", coupling_columns),
            ("trajectories", trajectory_columns),
            ("rcos", signature_columns),
        ):
            if member[name] is not None:
                measured |= reader(member[name])
        for dataset in list(member["law"]) or [None]:
            row = {
                "model": member["model"],
                "x": x,
                "dataset": dataset,
                "in_fits": member["model"] not in excluded,
                "probe": probe,
            } | facts
            if dataset is not None:
                row |= law_columns(member["law"][dataset], norm, TARGET_OFFSETS[probe])
                row |= evaluation_columns(member["evaluation"][dataset])
            if dataset in member.get("geometry", {}):
                row |= geometry_columns(member["geometry"][dataset])
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


CURVE_FIT_TOLERANCE = 1e-12
"""Relative tolerance of the exponential fit's parameters and sum of squares (SciPy's
default 1e-8 stops early where R² is low and the sum of squares is flat)."""
START_RATES = np.linspace(-10.0, 10.0, 401)
"""Rates B per standard deviation of x among which the exponential fit's start is the
best (a grid, so the start is deterministic and near the global least squares)."""


def _exponential(x: np.ndarray, amplitude: float, rate: float) -> np.ndarray:
    return amplitude * np.exp(rate * x)


def _exponential_start(u: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(A, B) of the least-squares y = A · exp(B · u) with B on ``START_RATES``: for each
    B the best A is Σ y e^{Bu} / Σ e^{2Bu}."""
    basis = np.exp(np.outer(START_RATES, u))
    amplitudes = basis @ y / np.einsum("ij,ij->i", basis, basis)
    losses = ((y - amplitudes[:, None] * basis) ** 2).sum(axis=1)
    best = int(np.argmin(losses))
    return float(amplitudes[best]), float(START_RATES[best])


def exponential_fit(x: Sequence[float], y: Sequence[float]) -> dict[str, float] | None:
    """Least squares y = amplitude · exp(rate · x) (Aubry et al., Fig. 8: the score against
    coupling; two parameters, no offset) by ``scipy.optimize.curve_fit`` on the
    standardised u = (x − mean x) / std x, y = A · exp(B · u), which stays well
    conditioned however close the x, started from the best (A, B) of a grid of B
    (``_exponential_start``: deterministic, no random start, and clear of the local minima
    a start from the line of ln y can fall into); then rate = B / std x and amplitude =
    A · exp(−rate · mean x) (infinite if that overflows). Amplitude, rate, R² = 1 −
    Σ(y − ŷ)² / Σ(y − ȳ)² on y's own scale (0 for a constant y, as ``linear_fit``), n.
    None when y changes sign or is zero: no exponential passes through it (its least
    squares runs off to an infinite rate). Float64."""
    xs, ys = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if not (np.all(ys > 0) or np.all(ys < 0)):
        return None
    centre, scale = xs.mean(), xs.std()
    us = (xs - centre) / scale
    (level, growth), _ = optimize.curve_fit(
        _exponential,
        us,
        ys,
        p0=_exponential_start(us, ys),
        xtol=CURVE_FIT_TOLERANCE,
        ftol=CURVE_FIT_TOLERANCE,
    )
    residual = ys - _exponential(us, level, growth)
    total = ys - ys.mean()
    sum_total = float(total @ total)
    rate = growth / scale
    return {
        "amplitude": float(level * np.exp(-rate * centre)),
        "rate": float(rate),
        "r2": 1.0 - float(residual @ residual) / sum_total if sum_total > 0 else 0.0,
        "n": len(xs),
    }


HYPERPARAMETERS = {
    "log10_parameters": pl.col("parameters").cast(pl.Float64).log10(),
    "num_layers": pl.col("num_layers"),
    "hidden_size": pl.col("hidden_size"),
}
"""The hyper-parameters each score is fitted against (Aubry et al. §5.4: coupling
correlates with the score more than parameter budget, depth and embedding dimension)."""
FITS_SCHEMA = {
    "subset": pl.String,
    "predictor": pl.String,
    "k": pl.Int64,
    "metric": pl.String,
    "pairs": pl.String,
    "form": pl.String,
    "generalisation": pl.String,
    "dataset": pl.String,
    "slope": pl.Float64,
    "intercept": pl.Float64,
    "amplitude": pl.Float64,
    "rate": pl.Float64,
    "r2": pl.Float64,
    "p_value": pl.Float64,
    "n": pl.Int64,
}
"""Columns of ``fits.csv``: ``subset`` (``ALL_MEMBERS`` or a subset's name), then those
of the fit; a linear fit leaves ``amplitude`` and ``rate`` null, an
exponential one ``slope``, ``intercept`` and ``p_value``, a hyper-parameter's ``k``,
``metric`` and ``pairs``."""


def coupling_predictor(column: str) -> str:
    """The predictor of a coupling aggregate's column: ``coupling_k{K}…`` for
    ``miscoupling_all_k{K}…``, ``coupling_offdiagonal_k{K}…`` for
    ``miscoupling_offdiagonal_k{K}…``."""
    return column.replace("miscoupling_all_", "coupling_", 1).replace("miscoupling_", "coupling_")


def predictor_expression(predictor: str) -> pl.Expr:
    """The summary expression of a fit's predictor: coupling = −``miscoupling_…`` for a
    ``coupling_predictor``, else the hyper-parameter's."""
    if predictor.startswith("coupling_offdiagonal_"):
        return -pl.col(predictor.replace("coupling_", "miscoupling_", 1))
    if predictor.startswith("coupling_"):
        return -pl.col(predictor.replace("coupling_", "miscoupling_all_", 1))
    return HYPERPARAMETERS[predictor]


def fit_points(
    summary: pl.DataFrame, predictor: str, measure: str, dataset: str | None, in_fits: bool = True
) -> pl.DataFrame:
    """(x, y) of the members with both numbers, one per model (of ``dataset``'s rows when
    given): those with ``in_fits`` (or, with ``in_fits=False``, those left out)."""
    rows = summary if dataset is None else summary.filter(pl.col("dataset") == dataset)
    return (
        rows.filter(pl.col("in_fits") == in_fits)
        .unique("model", keep="first", maintain_order=True)
        .select(predictor_expression(predictor).alias("x"), pl.col(measure).alias("y"))
        .drop_nulls()
    )


def _fit_rows(
    summary: pl.DataFrame,
    predictor: str,
    measures: Sequence[tuple[str, str | None]],
    form: str,
    labels: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """The fits of ``form`` (``linear``, ``exponential``) of each measure against the
    predictor that have three models with both numbers and two distinct x."""
    rows = []
    for measure, dataset in measures:
        points = fit_points(summary, predictor, measure, dataset)
        if len(points) < 3 or points["x"].n_unique() < 2:
            continue
        xs, ys = points["x"].to_numpy(), points["y"].to_numpy()
        fit = linear_fit(xs, ys) if form == "linear" else exponential_fit(xs, ys)
        if fit is not None:
            rows.append(
                {"predictor": predictor, "form": form, "generalisation": measure}
                | {"dataset": dataset}
                | labels
                | fit
            )
    return rows


def held_out_measure(summary: pl.DataFrame) -> str | None:
    """The held-out measure the fits compare across the members with ``in_fits``:
    ``loss`` (nats per token) when they share one tokenizer (or the summary does not say),
    ``bits_per_byte`` when their tokenizers differ; None without an evaluation."""
    if "loss" not in summary.columns:
        return None
    if "tokenizer" not in summary.columns:
        return "loss"
    tokenizers = summary.filter(pl.col("in_fits"))["tokenizer"].drop_nulls()
    return "bits_per_byte" if tokenizers.n_unique() > 1 else "loss"


Bounds = Mapping[str, Sequence[float | None]]
"""A subset of a series' members: {summary column: [lower, upper]}, lower < value ≤ upper,
None unbounded."""


def subset_rows(summary: pl.DataFrame, bounds: Bounds, name: str) -> pl.DataFrame:
    """The rows of ``summary`` in the subset ``name`` (``series.<key>.fit_subsets``): those
    whose value v of each bounded column has lower < v ≤ upper (the lower bound exclusive,
    the upper inclusive, so [45, None] is v > 45; None: unbounded; a null v is outside, so
    [None, None] is the rows that have a value). A column that is not a numeric column of
    the summary is an error naming those it has."""
    numeric = [column for column, dtype in summary.schema.items() if dtype.is_numeric()]
    inside = pl.lit(True)
    for column, (lower, upper) in bounds.items():
        if column not in numeric:
            raise LayerlawsError(
                f"series fit_subsets.{name} bounds {column!r}, which is not a numeric column "
                f"of the series summary; bound one of its numeric columns: {numeric}"
            )
        value = pl.col(column).cast(pl.Float64)
        inside &= value.is_not_null()
        if lower is not None:
            inside &= value > lower
        if upper is not None:
            inside &= value <= upper
    return summary.filter(inside)


def series_fits(summary: pl.DataFrame, subsets: Mapping[str, Bounds] | None = None) -> pl.DataFrame:
    """The series' fits (columns ``FITS_SCHEMA``) over its members with ``in_fits``
    (``subset`` ``all``), then the same fits over each subset of ``subsets`` (name →
    bounds, ``subset_rows``; ``subset`` its name; Aubry et al. Table 4), all with the
    held-out measure of the whole series (``held_out_measure``). The fits of each:
    - generalisation against coupling (Aubry et al., Fig. 1a: m of Eq. 13 averaged over
      all layer pairs, ``GENERALISATION_METRIC``), for every metric, K and ``pairs``:
      coupling = −``miscoupling_all_k{K}[_{metric}]`` as x (predictor
      ``coupling_k{K}[_{metric}]``, ``pairs`` ``all``) and −``miscoupling_offdiagonal_…``
      (``coupling_offdiagonal_k{K}…``, ``pairs`` ``offdiagonal``: the pairs l ≠ l′, whose
      mean does not favour shallow models by the diagonal's share 1/L), as y each external
      score (one point per model) and the held-out measure on each dataset
      (``held_out_measure``: the loss, or bits per byte across tokenizers), by least
      squares (``linear``); and each score against the all-pairs mean by
      ``exponential_fit`` (``exponential``, Fig. 8);
    - each score against ``log10_parameters``, ``num_layers`` and ``hidden_size``
      (``linear``, §5.4).
    A fit needs three models with both numbers and two distinct x."""
    held_out = held_out_measure(summary)
    rows = [{"subset": ALL_MEMBERS} | row for row in _fits_over(summary, held_out)]
    for name, bounds in (subsets or {}).items():
        members = subset_rows(summary, bounds, name)
        rows += [{"subset": name} | row for row in _fits_over(members, held_out)]
    return pl.DataFrame(rows, schema=FITS_SCHEMA)


def _fits_over(summary: pl.DataFrame, held_out: str | None) -> list[dict[str, Any]]:
    """The rows of ``series_fits`` over the members of ``summary`` with ``in_fits``, with
    ``held_out`` as the held-out measure."""
    scores = [(c, None) for c in summary.columns if c.startswith("score_")]
    measures = list(scores)
    if held_out is not None:
        measures += [(held_out, d) for d in summary["dataset"].unique(maintain_order=True)]
    rows = []
    aggregates = tuple(f"miscoupling_{pairs}_k" for pairs in PAIRS)
    for column in [c for c in summary.columns if c.startswith(aggregates)]:
        pairs, k, metric = coupling_column_parts(column)
        predictor = coupling_predictor(column)
        labels = {"k": k, "metric": metric, "pairs": pairs}
        rows += _fit_rows(summary, predictor, measures, "linear", labels)
        if pairs == "all":
            rows += _fit_rows(summary, predictor, scores, "exponential", labels)
    for predictor in HYPERPARAMETERS:
        rows += _fit_rows(summary, predictor, scores, "linear", {})
    return rows
