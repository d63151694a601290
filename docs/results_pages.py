"""The pages that quote a default run's numbers, rendered from templates rather than typed:
"What the default run finds" (docs/results.md) and README.md, whose section "The law on the
default run" quotes the headline numbers. Each page is its template (``TEMPLATES``, under
docs/templates/) with every placeholder ``{{ <entry> }}`` replaced by that entry's number.

Each entry names one number: a function of the results folder that returns the value, and
the format the page writes it in (U+2212 minus, an explicit + where the page writes one,
thousands commas, the page's decimals). Numbers that are properties of the config, the
models or the papers are not entries, nor are those of runs under other settings (other C,
the keys-only signatures, the frequent-class fuzziness, the paper's learning rate, the
measures before the final norm) or timings: they are text of the templates.

After a default run (`make run`):

    python docs/results_pages.py results --write-snapshot docs/default_run_numbers.json
    python docs/results_pages.py --render

The first stores every value, formatted, by entry name; the second writes the pages from
their templates and the snapshot. ``--check`` lists every page that differs from its
rendering, every placeholder that names no entry, every entry no template or more than one
place quotes, and every snapshot key that is no entry, and exits non-zero if there is any
(tests/test_results_pages.py runs the same check). To change a page's prose, edit its
template and render.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from layerlaws.core.atomic import atomic_path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = {
    "README.md": "docs/templates/README.md",
    "docs/results.md": "docs/templates/results.md",
}
"""Each page that quotes the default run's numbers and its template, relative to the
repository."""
SNAPSHOT = ROOT / "docs" / "default_run_numbers.json"
PLACEHOLDER = re.compile(r"\{\{ ([\w.@-]+) \}\}")
"""Where a template quotes an entry's number: ``{{ <entry name> }}``."""

MINUS = "\N{MINUS SIGN}"


# Formats: a float (or int) to a page's text.


def _signed(text: str, negative: bool, plus: bool) -> str:
    if float(text.replace(",", "")) == 0:
        return text  # a value that rounds to zero carries no sign
    if negative:
        return MINUS + text
    return "+" + text if plus else text


def fixed(decimals: int, plus: bool = False) -> Callable[[float], str]:
    """``decimals`` decimals; U+2212 for a negative value, + for a positive one if ``plus``."""

    def format_(value: float) -> str:
        return _signed(f"{abs(value):.{decimals}f}", value < 0, plus)

    format_.__name__ = f"fixed({decimals}{', plus' if plus else ''})"
    return format_


def signed(decimals: int) -> Callable[[float], str]:
    """``fixed`` with an explicit + (a Pearson r or an R_order as the pages write them)."""
    return fixed(decimals, plus=True)


def count(value: float) -> str:
    """A whole number with thousands commas (a value with decimals rounded)."""
    return _signed(f"{abs(round(value)):,}", value < 0, False)


def percent(decimals: int) -> Callable[[float], str]:
    """A fraction as a percentage, ``decimals`` decimals (the % sign stays in the page)."""

    def format_(value: float) -> str:
        return fixed(decimals)(100 * value)

    format_.__name__ = f"percent({decimals})"
    return format_


def significant(digits: int) -> Callable[[float], str]:
    """``digits`` significant digits, trailing zeros kept (1.0, 0.52, 53), thousands commas."""

    def format_(value: float) -> str:
        if value == 0:
            return fixed(digits - 1)(0.0)
        rounded = float(f"{abs(value):.{digits - 1}e}")
        decimals = max(0, digits - 1 - math.floor(math.log10(rounded)))
        return _signed(f"{rounded:,.{decimals}f}", value < 0, False)

    format_.__name__ = f"significant({digits})"
    return format_


# The results folder.


class Results:
    """The tables of one results folder, each read once."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._tables: dict[str, object] = {}
        self._json: dict[str, dict] = {}

    def table(self, path: str):
        """A CSV or Parquet table of the folder (a polars DataFrame)."""
        if path not in self._tables:
            import polars as pl

            file = self.root / path
            if file.suffix == ".parquet":
                self._tables[path] = pl.read_parquet(file)
            else:
                self._tables[path] = pl.read_csv(file, infer_schema_length=None)
        return self._tables[path]

    def json(self, path: str) -> dict:
        if path not in self._json:
            self._json[path] = json.loads((self.root / path).read_text())
        return self._json[path]

    def rows(self, path: str, **where):
        """The rows of ``path`` whose columns equal ``where``'s values."""
        import polars as pl

        frame = self.table(path)
        for column, value in where.items():
            frame = frame.filter(pl.col(column) == value)
        return frame

    def one(self, path: str, column: str, **where):
        """``column`` of the one row of ``path`` that ``where`` selects."""
        frame = self.rows(path, **where)
        if frame.height != 1:
            raise LookupError(f"{path}: {frame.height} rows where {where}, expected one")
        return frame[column][0]


@dataclass(frozen=True)
class Entry:
    name: str
    value: Callable[[Results], float]
    format: Callable[[float], str]

    def text(self, results: Results) -> str:
        return self.format(self.value(results))


# The entries, in the order of the pages (README.md, docs/results.md) and of each page.

SMOLLM2 = "smollm2-135m"
SUMMARY = "equilearning/summary.csv"
OFFSETS = {"next": 1, "next_next": 2, "current": 0, "previous": -1}
COUPLING = f"coupling/{SMOLLM2}/paper"
TRAJECTORIES = f"{COUPLING}/trajectories"
TRAINING = "training/wiki-llama"
SERIES = "series/wiki-llama/summary.csv"
STEPS = (0, 10, 50, 200, 800)


def _law(column: str, dataset: str, target: str, norm="model", control="none", model=SMOLLM2):
    return lambda r: r.one(
        SUMMARY,
        column,
        model=model,
        dataset=dataset,
        offset=OFFSETS[target],
        norm=norm,
        control=control,
    )


def _fuzziness_law(column: str, model: str, dataset: str):
    path = f"equilearning/{model}/{dataset}/fuzziness_law.csv"
    return lambda r: r.one(path, column, norm="model")


def _fuzziness(column: str, layer: int):
    path = f"equilearning/{SMOLLM2}/wiki-science/fuzziness.csv"
    return lambda r: r.one(path, column, layer=layer, norm="model")


def _next_token_classes(r: Results):
    """Rows per class of separation fuzziness on wiki-science (every next token is a class):
    a text token followed by a text token of the same text, the class the next one's id."""
    import polars as pl

    tokens = r.table(f"tokens/{SMOLLM2}/wiki-science.parquet").sort("sentence_id", "position")
    pairs = tokens.with_columns(
        next_id=pl.col("token_id").shift(-1),
        next_special=pl.col("is_special").shift(-1),
        next_sentence=pl.col("sentence_id").shift(-1),
    ).filter(
        ~pl.col("is_special"),
        ~pl.col("next_special"),
        pl.col("next_sentence") == pl.col("sentence_id"),
    )
    return pairs.group_by("next_id").len()["len"]


def _frequent(r: Results, min_rows: int = 20):
    rows = _next_token_classes(r)
    return rows.filter(rows >= min_rows)


def _best(rank: int):
    return lambda r: r.one("equilearning/best_datasets.csv", "pearson", model=SMOLLM2, rank=rank)


def _texts(r: Results, dataset: str) -> int:
    shards = sorted((r.root / f"signatures/{SMOLLM2}/{dataset}/shards").glob("*.parquet"))
    return sum(
        r.table(str(shard.relative_to(r.root)))["sentence_id"].n_unique() for shard in shards
    )


def _rcos(matrix: str, signature: str, corpus: str = "wikipedia"):
    return lambda r: r.one(
        f"signatures/{SMOLLM2}/rcos_by_corpus.csv",
        "r_cos",
        corpus=corpus,
        matrix=matrix,
        signature=signature,
    )


def _count_of_rank(r: Results, rank: int) -> int:
    """The count of the ``rank``-th most frequent token of the pool (C = ``rank``'s rarest)."""
    counts = r.table(f"signatures/{SMOLLM2}/wikipedia/unigrams.parquet")["count"]
    return counts.sort(descending=True)[rank - 1]


def _synthetic(task: str, model: str, column: str):
    return lambda r: r.one("synthetic/summary.csv", column, task=task, model=model)


def _signature(task: str, signature: str, column: str = "r_order"):
    path = f"synthetic/{task}/signatures.csv"
    return lambda r: r.one(path, column, signature=signature)


def _first_epoch_r_order(task: str, model: str):
    return lambda r: r.rows(f"synthetic/{task}/{model}/r_order.csv", epoch=1)["r_order"].mean()


def _training_pairs(r: Results) -> int:
    import numpy as np

    with np.load(r.root / "synthetic/add/data.npz") as data:
        return len(data["train_labels"])


def _alignment_range(r: Results, bound: str) -> float:
    """The smallest or largest alignment with φ^(X|y), every task but F_lin on f_mod."""
    import polars as pl

    values = r.table("synthetic/summary.csv").filter(
        ~((pl.col("task") == "mod") & (pl.col("model") == "linear"))
    )["alignment_context_given_label"]
    return values.min() if bound == "min" else values.max()


def _depth(weights: str, k: int, metric: str = "paper", distance: int | None = None):
    """Mean mis-coupling over the off-diagonal layer pairs (or those ``distance`` apart) of
    the prompts' mean."""
    import polars as pl

    def value(r: Results) -> float:
        frame = r.rows(f"{COUPLING}/depth.csv", weights=weights, prompt="mean", k=k, metric=metric)
        gap = (pl.col("layer_a") - pl.col("layer_b")).abs()
        frame = frame.filter(gap != 0 if distance is None else gap == distance)
        return frame["miscoupling"].mean()

    return value


def _top_singular_value(weights: str, layer: int):
    """σ_1 of the last token's Jacobian at ``layer``, median over prompts."""
    path = f"{COUPLING}/singular_values.csv"
    return lambda r: r.rows(path, weights=weights, layer=layer, rank=1)["singular_value"].median()


def _token_wise(weights: str, kind: str):
    """Mean m̃ (K = 10) over the pairs of distinct tokens, every prompt: the prompts'
    means (token_means.csv) weighted by their pairs."""

    def value(r: Results) -> float:
        frame = r.rows(
            f"{COUPLING}/token_means.csv", weights=weights, kind=kind, k=10, metric="paper"
        )
        return (frame["miscoupling"] * frame["pairs"]).sum() / frame["pairs"].sum()

    return value


def _prompt_tokens(prompt: int):
    return lambda r: r.rows(f"{TRAJECTORIES}/tokens.csv", weights="trained", prompt=prompt).height


def _trajectory(weights: str, column: str, statistic: str):
    """A statistic over the tokens of trajectories/tokens.csv: mean, median, q25, q75 (the
    quartiles polars' default, the nearest value, as in the figures' bands)."""

    def value(r: Results) -> float:
        values = r.rows(f"{TRAJECTORIES}/tokens.csv", weights=weights)[column]
        if statistic.startswith("q"):
            return values.quantile(int(statistic[1:]) / 100, "nearest")
        return getattr(values, statistic)()

    return value


def _layers(weights: str, column: str, layer: int, statistic: str = "mean"):
    """A statistic over the tokens of trajectories/layers.csv at ``layer`` (NaN left out)."""

    def value(r: Results) -> float:
        values = r.rows(f"{TRAJECTORIES}/layers.csv", weights=weights, layer=layer)[column]
        return getattr(values.drop_nans(), statistic)()

    return value


def _lens_entropy_range(bound: str, first: int = 1, last: int = 22):
    """The smallest or largest mean lens entropy of the trained model over blocks
    ``first``…``last``."""
    import polars as pl

    def value(r: Results) -> float:
        frame = r.rows(f"{TRAJECTORIES}/layers.csv", weights="trained").filter(
            pl.col("layer").is_between(first, last)
        )
        means = frame.group_by("layer").agg(pl.col("logit_entropy").mean())["logit_entropy"]
        return means.min() if bound == "min" else means.max()

    return value


def _tokens_with_next(r: Results) -> int:
    frame = r.rows(f"{TRAJECTORIES}/layers.csv", weights="trained", layer=0)
    return frame["next_token_loss"].is_not_nan().sum()


def _view_count(word: str, layer: int = 8):
    path = f"equilearning/{SMOLLM2}/wiki-science/token_views.csv"
    return lambda r: r.rows(path, word=word, layer=layer).height


def _series(step: int, column: str, dataset: str = "wiki-science"):
    model = f"wiki-llama@step{step}"
    return lambda r: r.one(SERIES, column, model=model, dataset=dataset)


def _geometry(column: str, layer: int, model: str = SMOLLM2, dataset: str = "wiki-science"):
    """``column`` of a run's representation geometry (``observers/geometry.csv``) at ``layer``."""
    path = f"equilearning/{model}/{dataset}/observers/geometry.csv"
    return lambda r: r.one(path, column, layer=layer)


def _least_cka_previous(first: int, last: int):
    """The smallest linear CKA with the previous layer of SmolLM2's layers first…last."""
    path = f"equilearning/{SMOLLM2}/wiki-science/observers/geometry.csv"
    return lambda r: (
        r.table(path).filter(r.table(path)["layer"].is_between(first, last))["cka_previous"].min()
    )


def _pr(layer: int):
    """SmolLM2's next-token PR on wiki-science at ``layer`` (norm model, no control)."""
    path = f"equilearning/{SMOLLM2}/wiki-science/pr.csv"
    return lambda r: r.one(path, "pr", layer=layer, offset=1, norm="model", control="none")


def _checkpoint_held_out(step: int):
    return lambda r: r.one(f"{TRAINING}/checkpoints.csv", "held_out_loss", step=step)


def _training(key: str):
    return lambda r: r.json(f"{TRAINING}/training.json")[key]


def _epochs(r: Results) -> float:
    """The packed sequences read over those of the corpus."""
    last = r.table(f"{TRAINING}/checkpoints.csv")["tokens_seen"].max()
    return last / r.json(f"{TRAINING}/training.json")["corpus_tokens"]


def _embedding_parameters(r: Results) -> int:
    facts = r.json(f"models/wiki-llama@step{STEPS[-1]}/layerlaws_model.json")
    return facts["vocab_size"] * facts["hidden_size"]


def _fit(column: str, predictor: str = "coupling_k10", dataset: str = "wiki-science"):
    import polars as pl

    def value(r: Results) -> float:
        frame = r.rows(
            "series/wiki-llama/fits.csv",
            predictor=predictor,
            form="linear",
            generalisation="loss",
            dataset=dataset,
        )
        if "pairs" in frame.columns:
            frame = frame.filter(pl.col("pairs") == "all")
        if frame.height != 1:
            raise LookupError(f"fits.csv: {frame.height} rows of {predictor} on {dataset}")
        return frame[column][0]

    return value


def _entries() -> Iterator[Entry]:

    # README.md's headline: the law on wiki-science and wiki-culture (the law table's numbers),
    # and the small Llama's next-token r at steps 0 and 800 on the dataset the headline figure
    # draws (docs/headline.py), wiki-science.
    for name, value, format_ in (
        ("law.wiki-science.next.r", _law("pearson", "wiki-science", "next"), fixed(3)),
        ("law.wiki-science.next.rho", _law("rho", "wiki-science", "next"), fixed(4)),
        ("law.wiki-science.next.pr_first", _law("pr_first", "wiki-science", "next"), fixed(3)),
        ("law.wiki-science.next.pr_last", _law("pr_last", "wiki-science", "next"), fixed(3)),
        ("law.wiki-culture.next.r", _law("pearson", "wiki-culture", "next"), fixed(3)),
        ("series.step0.wiki-science.pearson", _series(0, "pearson", "wiki-science"), fixed(3)),
        ("series.step800.wiki-science.pearson", _series(800, "pearson", "wiki-science"), fixed(3)),
    ):
        yield Entry(f"headline.{name}", value, format_)

    # The probing datasets.
    for dataset in ("wiki-science", "wiki-culture"):
        tokens = f"tokens/{SMOLLM2}/{dataset}.parquet"
        pr = f"equilearning/{SMOLLM2}/{dataset}/pr.csv"
        yield Entry(f"tokens.{dataset}", lambda r, tokens=tokens: r.table(tokens).height, count)
        yield Entry(
            f"rows.{dataset}",
            lambda r, pr=pr: r.one(pr, "n_rows", layer=0, offset=1, norm="model", control="none"),
            count,
        )

    # The law table and the prose after it.
    rows = (
        ("wiki-science", "next"),
        ("wiki-culture", "next"),
        ("wiki-science", "next_next"),
        ("wiki-science", "current"),
        ("wiki-science", "previous"),
    )
    columns = (
        ("r", "pearson", signed(3)),
        ("rho", "rho", fixed(4)),
        ("pr_first", "pr_first", fixed(3)),
        ("pr_last", "pr_last", fixed(3)),
    )
    for dataset, target in rows:
        for name, column, format_ in columns:
            yield Entry(f"law.{dataset}.{target}.{name}", _law(column, dataset, target), format_)
    for name, control in (("shuffled_vocab.decay", "shuffled_vocab"), ("decay", "none")):
        yield Entry(
            f"law.wiki-science.next.{name}",
            _law("overall_decay", "wiki-science", "next", control=control),
            fixed(3),
        )
    for norm in ("standardize", "none"):
        yield Entry(
            f"law.wiki-science.next.{norm}.r",
            _law("pearson", "wiki-science", "next", norm=norm),
            fixed(3),
        )

    # Separation fuzziness.
    for name, value in (
        ("classes", _fuzziness("n_classes", 1)),
        ("rows", _fuzziness("n_rows", 1)),
        ("one_row_classes", lambda r: (_next_token_classes(r) == 1).sum()),
        ("first", _fuzziness_law("fuzziness_first", SMOLLM2, "wiki-science")),
        ("last", _fuzziness_law("fuzziness_last", SMOLLM2, "wiki-science")),
        ("frequent_classes", lambda r: _frequent(r).len()),
        ("frequent_rows", lambda r: _frequent(r).sum()),
    ):
        yield Entry(f"fuzziness.wiki-science.{name}", value, count)
    for dataset in ("wiki-science", "wiki-culture"):
        for column in ("pearson", "rho"):
            yield Entry(
                f"fuzziness.{dataset}.{column}", _fuzziness_law(column, SMOLLM2, dataset), fixed(3)
            )
    yield Entry("fuzziness.against_pr.r", _law("pearson", "wiki-science", "next"), fixed(3))
    for rank in (1, 2):
        yield Entry(f"best.smollm2-135m.rank{rank}.r", _best(rank), fixed(4))

    # Signatures.
    yield Entry(
        "signatures.wikipedia.texts",
        lambda r: sum(_texts(r, d) for d in ("wiki-science", "wiki-culture", "wiki-other")),
        count,
    )
    summary = f"signatures/{SMOLLM2}/wikipedia/summary.json"
    for key in ("corpus_text_tokens", "distinct_tokens", "bigrams"):
        yield Entry(f"signatures.wikipedia.{key}", lambda r, key=key: r.json(summary)[key], count)
    for matrix, signature in (("W_E", "next"), ("W_U", "pre"), ("W_E", "tilde"), ("W_U", "tilde")):
        yield Entry(
            f"rcos.wikipedia.{matrix}.{signature}",
            lambda r, m=matrix, s=signature: r.one(
                f"signatures/{SMOLLM2}/wikipedia/rcos.csv", "r_cos", matrix=m, signature=s
            ),
            fixed(3),
        )
    percentiles = f"signatures/{SMOLLM2}/wikipedia/percentiles.csv"
    for decile in (1, 10):
        yield Entry(
            f"percentiles.wikipedia.W_E.next.decile{decile}.mean",
            lambda r, d=decile: r.one(
                percentiles, "mean", matrix="W_E", signature="next", decile=d
            ),
            fixed(1),
        )
    yield Entry("rcos.wikipedia.W_E.next.c2000", _rcos("W_E", "next"), fixed(3))
    yield Entry(
        "signatures.wikipedia.count_of_10000th_token", lambda r: _count_of_rank(r, 10_000), count
    )
    corpora = ("wiki-science", "wiki-culture", "wiki-other", "wikipedia")
    for corpus in corpora:
        yield Entry(f"rcos_by_corpus.{corpus}.W_E.next", _rcos("W_E", "next", corpus), fixed(3))
        yield Entry(f"rcos_by_corpus.{corpus}.W_U.pre", _rcos("W_U", "pre", corpus), fixed(3))

    # Synthetic addition tasks: the table (F_lin, F_ffn: R_order ± sd, train accuracy; the
    # distinct signature's R_order, keys only / Eq. 4 as written).
    tasks = ("add", "add_same_range", "mod")
    columns = (
        ("linear", "r_order_mean", "r_order"),
        ("linear", "r_order_sd", "r_order_sd"),
        ("linear", "train_accuracy", "train_accuracy"),
        ("ffn", "r_order_mean", "r_order"),
        ("ffn", "r_order_sd", "r_order_sd"),
        ("ffn", "train_accuracy", "train_accuracy"),
    )
    for task in tasks:
        for model, column, name in columns:
            yield Entry(
                f"synthetic.{task}.{model}.{name}",
                _synthetic(task, model, column),
                fixed(2) if column == "train_accuracy" else fixed(3),
            )
    # φ^y counts no inputs x′: keys only and Eq. 4 as written are the same signature.
    for name, task, signature in (
        ("add.label.r_order.keys", "add", "label"),
        ("add.label.r_order", "add", "label"),
        ("add_same_range.context.r_order", "add_same_range", "context"),
        ("mod.context_given_label.r_order", "mod", "context_given_label"),
    ):
        yield Entry(f"synthetic.{name}", _signature(task, signature), signed(3))
    yield Entry(
        "synthetic.mod.linear.train_accuracy.percent",
        _synthetic("mod", "linear", "train_accuracy"),
        percent(0),
    )
    for task in ("add_same_range", "add"):
        yield Entry(
            f"synthetic.{task}.linear.epoch1.r_order",
            _first_epoch_r_order(task, "linear"),
            fixed(2),
        )
    for name, value, format_ in (
        ("add.linear.alignment_label", _synthetic("add", "linear", "alignment_label"), fixed(2)),
        (
            "add_same_range.linear.alignment_label",
            _synthetic("add_same_range", "linear", "alignment_label"),
            fixed(2),
        ),
        ("mod.label.min_cosine", _signature("mod", "label", "min_cosine"), fixed(2)),
        ("add.context.min_cosine", _signature("add", "context", "min_cosine"), fixed(2)),
        (
            "add.context.max_cosine",
            lambda r: (
                _signature("add", "context", "min_cosine")(r)
                + _signature("add", "context", "cosine_spread")(r)
            ),
            fixed(2),
        ),
        ("training_pairs", _training_pairs, count),
        (
            "add_same_range.context.r_order.prose",
            _signature("add_same_range", "context"),
            signed(2),
        ),
        ("alignment_context_given_label.min", lambda r: _alignment_range(r, "min"), fixed(2)),
        ("alignment_context_given_label.max", lambda r: _alignment_range(r, "max"), fixed(2)),
        (
            "add_same_range.ffn.alignment_context",
            _synthetic("add_same_range", "ffn", "alignment_context"),
            fixed(2),
        ),
    ):
        yield Entry(f"synthetic.{name}", value, format_)

    # Block coupling.
    for prompt in range(3):
        yield Entry(f"coupling.prompt{prompt}.tokens", _prompt_tokens(prompt), count)
    ks = (10, 30, 50)
    for weights in ("trained", "random"):
        for k in ks:
            yield Entry(f"coupling.depth.paper.k{k}.{weights}", _depth(weights, k), fixed(3))
    metrics = (
        "paper",
        "unnormalised",
        "released_norm",
        "released_norm_swapped",
        "released_trace",
        "released_trace_swapped",
    )
    for metric in metrics:
        for k, weights in ((k, w) for k in ks for w in ("trained", "random")):
            yield Entry(
                f"coupling.metrics.{metric}.k{k}.{weights}", _depth(weights, k, metric), fixed(3)
            )
    for weights, distance in ((w, d) for w in ("trained", "random") for d in (1, 10, 29)):
        yield Entry(
            f"coupling.depth.paper.k10.{weights}.distance{distance}",
            _depth(weights, 10, distance=distance),
            fixed(3),
        )
    for weights, layer in ((w, layer) for w in ("trained", "random") for layer in (1, 15, 30)):
        yield Entry(
            f"coupling.sigma1.{weights}.layer{layer}",
            _top_singular_value(weights, layer),
            significant(2),
        )
    for weights, kind in (
        (w, kind) for w in ("random", "trained") for kind in ("self", "fixed_output", "fixed_input")
    ):
        yield Entry(
            f"coupling.tokens.layer15.{kind}.{weights}", _token_wise(weights, kind), fixed(2)
        )

    # Trajectories.
    yield Entry(
        "trajectories.tokens",
        lambda r: r.rows(f"{TRAJECTORIES}/tokens.csv", weights="trained").height,
        count,
    )
    statistics = ("mean", "median", "q25", "q75")
    for weights, statistic in ((w, s) for w in ("trained", "random") for s in statistics):
        yield Entry(
            f"trajectories.lss.{weights}.{statistic}",
            _trajectory(weights, "lss", statistic),
            fixed(2),
        )
    for layer, format_ in ((0, significant(2)), (29, count), (30, significant(2))):
        yield Entry(
            f"trajectories.norm.trained.layer{layer}.median",
            _layers("trained", "norm", layer, "median"),
            format_,
        )
    for weights, statistic in [("trained", s) for s in statistics] + [
        ("random", "mean"),
        ("random", "median"),
    ]:
        yield Entry(
            f"trajectories.expodistance.{weights}.{statistic}",
            _trajectory(weights, "expodistance", statistic),
            significant(3),
        )
    for weights, statistic in (("trained", "mean"), ("trained", "median"), ("random", "mean")):
        yield Entry(
            f"trajectories.equidistance_cv.{weights}.{statistic}",
            _trajectory(weights, "equidistance_cv", statistic),
            fixed(2),
        )
    yield Entry("trajectories.tokens_with_next", _tokens_with_next, count)
    for layer in (1, 22, 29, 30):
        yield Entry(
            f"trajectories.lens_loss.trained.layer{layer}",
            _layers("trained", "next_token_loss", layer),
            fixed(1),
        )
    for name, value in (
        ("blocks1-22.min", _lens_entropy_range("min")),
        ("blocks1-22.max", _lens_entropy_range("max")),
        ("layer30", _layers("trained", "logit_entropy", 30)),
    ):
        yield Entry(f"trajectories.lens_entropy.trained.{name}", value, fixed(1))
    yield Entry(
        "trajectories.lens_entropy.random.layer30", _layers("random", "logit_entropy", 30), fixed(2)
    )

    # Token views.
    for word in ("they", "them", "have", "had", "is", "are"):
        yield Entry(f"token_views.wiki-science.{word}", _view_count(word), count)

    # Training from scratch and the series.
    for name, value in (
        ("parameters", _series(0, "parameters")),
        ("embedding_parameters", _embedding_parameters),
    ):
        yield Entry(f"training.{name}", value, count)
    for key in ("texts", "corpus_tokens", "sequences"):
        yield Entry(f"training.{key}", _training(key), count)
    yield Entry("training.epochs", _epochs, fixed(2))
    table = (
        ("tokens_seen", count),
        ("loss", fixed(2)),
        ("accuracy", fixed(3)),
        ("pearson", signed(3)),
        ("rho", fixed(4)),
        ("rcos_we_next", fixed(3)),
        ("miscoupling_offdiagonal_k10", fixed(3)),
        ("lss_median", fixed(2)),
    )
    for step in STEPS:
        for column, format_ in table:
            yield Entry(f"series.step{step}.{column}", _series(step, column), format_)
    evaluation = f"evaluation/{SMOLLM2}/wiki-science.csv"
    for name, value, format_ in (
        ("series.step800.loss.prose", _series(800, "loss"), fixed(2)),
        ("training.step800.held_out_loss", _checkpoint_held_out(800), fixed(2)),
        ("training.held_out_sequences", _training("held_out_sequences"), count),
        ("training.held_out_unigram_loss", _training("held_out_unigram_loss"), fixed(2)),
        ("training.unigram_entropy", _training("unigram_entropy"), fixed(2)),
        ("series.step800.accuracy.percent", _series(800, "accuracy"), percent(0)),
        (
            "evaluation.smollm2-135m.wiki-science.loss",
            lambda r: r.table(evaluation)["loss"][0],
            fixed(2),
        ),
        (
            "evaluation.smollm2-135m.wiki-science.accuracy.percent",
            lambda r: r.table(evaluation)["accuracy"][0],
            percent(1),
        ),
    ):
        yield Entry(name, value, format_)
    for step, dataset in ((s, d) for s in (0, 50, 800) for d in ("wiki-science", "wiki-culture")):
        yield Entry(
            f"series.step{step}.{dataset}.pearson",
            _series(step, "pearson", dataset),
            signed(2) if step == 0 else fixed(2 if step == 50 else 3),
        )
    for name, value in (
        ("series.step800.overall_decay", _series(800, "overall_decay")),
        ("law.wiki-science.next.decay.prose", _law("overall_decay", "wiki-science", "next")),
    ):
        yield Entry(name, value, fixed(3))
    for step, dataset in ((s, d) for s in (0, 10, 800) for d in ("wiki-science", "wiki-culture")):
        yield Entry(
            f"series.step{step}.{dataset}.fuzziness.pearson",
            _fuzziness_law("pearson", f"wiki-llama@step{step}", dataset),
            fixed(3, plus=step == 10),
        )
    for step, column, format_ in (
        (0, "rcos_we_next", fixed(0)),
        (800, "rcos_we_next", fixed(2)),
        (200, "rcos_wu_pre", fixed(3)),
        (800, "rcos_wu_pre", fixed(3)),
    ):
        yield Entry(f"series.step{step}.{column}.prose", _series(step, column), format_)
    for step, format_ in ((0, fixed(3)), (50, fixed(2)), (800, fixed(2))):
        yield Entry(
            f"series.step{step}.miscoupling_offdiagonal_k10.prose",
            _series(step, "miscoupling_offdiagonal_k10"),
            format_,
        )
    for step in (0, 50, 800):
        yield Entry(
            f"series.step{step}.miscoupling_all_k10", _series(step, "miscoupling_all_k10"), fixed(2)
        )
        yield Entry(f"series.step{step}.lss_median.prose", _series(step, "lss_median"), fixed(2))
    for step in (0, 50, 200, 800):
        yield Entry(
            f"series.step{step}.miscoupling_all_k10_unnormalised",
            _series(step, "miscoupling_all_k10_unnormalised"),
            fixed(2),
        )
    for step in (0, 50, 800):
        yield Entry(
            f"series.step{step}.expodistance_median",
            _series(step, "expodistance_median"),
            significant(2),
        )
    for column in ("r2", "p_value"):
        yield Entry(f"fits.coupling_k10.loss.wiki-science.{column}", _fit(column), fixed(2))

    # The representation geometry (equilearning.observers: [geometry]).
    for column, layer, format_ in (
        ("effective_rank", 11, count),
        ("effective_rank", 12, count),
        ("prompt_entropy", 11, fixed(2)),
        ("prompt_entropy", 12, fixed(2)),
    ):
        yield Entry(f"geometry.layer{layer}.{column}", _geometry(column, layer), format_)
    yield Entry("geometry.layers13to28.least_cka_previous", _least_cka_previous(13, 28), fixed(4))
    yield Entry("geometry.layer30.effective_rank", _geometry("effective_rank", 30), count)
    for layer in (11, 12, 13):
        yield Entry(f"geometry.pr.layer{layer}", _pr(layer), fixed(3))
    for layer in (0, 30):
        yield Entry(f"geometry.layer{layer}.curvature", _geometry("curvature", layer), fixed(2))
    for step in STEPS:
        yield Entry(
            f"series.step{step}.effective_rank_last",
            _series(step, "effective_rank_last"),
            significant(3),
        )
    yield Entry("series.step50.anisotropy_last", _series(50, "anisotropy_last"), fixed(2))
    for step in (0, 800):
        yield Entry(f"series.step{step}.pr_last", _series(step, "pr_last"), fixed(2))


ENTRIES: tuple[Entry, ...] = tuple(_entries())


# Rendering and checking the pages.


def read_templates(root: Path = ROOT) -> dict[str, str]:
    """The text of each page's template under ``root``, by page."""
    return {page: (Path(root) / template).read_text() for page, template in TEMPLATES.items()}


def rendered(template: str, snapshot: Mapping[str, str]) -> str:
    """``template`` with each placeholder replaced by the snapshot's number; a ValueError naming
    a placeholder the snapshot lacks."""

    def number(place: re.Match) -> str:
        name = place.group(1)
        if name not in snapshot:
            raise ValueError(f"placeholder {{{{ {name} }}}} names no number of the snapshot")
        return snapshot[name]

    return PLACEHOLDER.sub(number, template)


def problems(
    pages: Mapping[str, str],
    templates: Mapping[str, str],
    snapshot: Mapping[str, str],
    entries=ENTRIES,
) -> list[str]:
    """Every page (``pages``: the text of each) that differs from its rendering, with its
    first differing line; every placeholder of the ``templates`` that names no entry, every
    entry quoted in no place or in several, and every name only the snapshot or only the
    entries have."""
    found = []
    names = [entry.name for entry in entries]
    for name in sorted(set(snapshot) - set(names)):
        found.append(f"{name}: in the snapshot, not an entry of the script")
    for name in names:
        if name not in snapshot:
            found.append(f"{name}: not in the snapshot")
    places = [place for text in templates.values() for place in PLACEHOLDER.findall(text)]
    for name in sorted(set(places) - set(names)):
        found.append(f"{name}: a placeholder that names no entry")
    for name in names:
        if places.count(name) != 1:
            found.append(f"{name}: quoted {places.count(name)} times by the templates, not once")
    if found:
        return found
    for page, template in templates.items():
        wanted = rendered(template, snapshot).splitlines()
        have = pages[page].splitlines()
        for number, (line, expected) in enumerate(zip(have, wanted, strict=False), 1):
            if line != expected:
                found.append(f"{page}:{number}: {line!r}, rendered {expected!r}")
                break
        else:
            if len(have) != len(wanted):
                found.append(f"{page}: {len(have)} lines, rendered {len(wanted)}")
    return found


def values(results: Path, entries=ENTRIES) -> dict[str, str]:
    found = Results(results)
    return {entry.name: entry.text(found) for entry in entries}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="?", type=Path, help="a default run's results folder")
    parser.add_argument("--write-snapshot", type=Path, metavar="JSON", help="store the values")
    parser.add_argument("--snapshot", type=Path, default=SNAPSHOT, help="(default: %(default)s)")
    parser.add_argument(
        "--root",
        type=Path,
        default=ROOT,
        help="the folder of the pages and their templates (default: %(default)s)",
    )
    parser.add_argument(
        "--render", action="store_true", help="write the pages from the templates and snapshot"
    )
    parser.add_argument("--check", action="store_true", help="compare the pages with it")
    arguments = parser.parse_args(argv)
    if not (arguments.write_snapshot or arguments.render or arguments.check):
        parser.error("nothing to do: --write-snapshot, --render or --check")
    if arguments.write_snapshot:
        if arguments.results is None:
            parser.error("--write-snapshot needs the results folder")
        computed = values(arguments.results)
        with atomic_path(arguments.write_snapshot) as temporary:
            temporary.write_text(json.dumps(computed, indent=1, ensure_ascii=False) + "\n")
        print(f"{len(computed)} numbers written to {arguments.write_snapshot}")
        arguments.snapshot = arguments.write_snapshot
    snapshot = json.loads(arguments.snapshot.read_text())
    templates = read_templates(arguments.root)
    if arguments.render:
        pages = {}
        for page, template in templates.items():
            try:
                pages[page] = rendered(template, snapshot)
            except ValueError as error:
                parser.exit(
                    1,
                    f"{TEMPLATES[page]}: {error} {arguments.snapshot}: name an entry of "
                    "docs/results_pages.py there, or add the entry and write the snapshot\n",
                )
        for page, text in pages.items():
            with atomic_path(arguments.root / page) as temporary:
                temporary.write_text(text)
        print(f"rendered {', '.join(TEMPLATES)}")
    if arguments.check:
        pages = {page: (arguments.root / page).read_text() for page in TEMPLATES}
        found = problems(pages, templates, snapshot)
        print(
            "\n".join(found)
            or f"{', '.join(TEMPLATES)} quote the snapshot's {len(snapshot)} numbers"
        )
        return 1 if found else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
