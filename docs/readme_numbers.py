"""The numbers the docs quote from a default run's tables, regenerated from them rather than
typed: those of "What the default run finds" (docs/results.md) and the headline numbers of
README.md's section "The law on the default run". Each number is quoted on one page of
``PAGES``.

Each entry names one number of a page: the page, a regular expression with one capture group
that matches exactly one place in that page (the number as quoted, with enough context to be
unique), a function of the results folder that returns the value, and the format the page
writes it in (U+2212 minus, an explicit + where the page writes one, thousands commas, the
page's decimals). Numbers that are properties of the config, the models or the papers are
not entries, nor are those of runs under other settings (other C, the keys-only signatures,
the frequent-class fuzziness, the paper's learning rate, the measures before the final norm)
or timings.

After a default run (`make run`):

    python docs/readme_numbers.py results --write-snapshot docs/default_run_numbers.json
    python docs/readme_numbers.py --update-pages

The first stores every value, formatted, by entry name; the second writes the snapshot's
values into the pages (only the captured numbers change). ``--check`` lists every entry whose
page's text differs from the snapshot or whose pattern does not match exactly once in its
page, and exits non-zero if there is any (tests/test_readme_numbers.py runs the same check).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = "README.md"
"""The page of the headline numbers (its section "The law on the default run")."""
RESULTS_PAGE = "docs/results.md"
"""The page of every other number: "What the default run finds"."""
PAGES = (README, RESULTS_PAGE)
"""The pages the numbers are quoted on and checked against, relative to the repository."""
SNAPSHOT = ROOT / "docs" / "default_run_numbers.json"

NUMBER = r"[−+]?\d[\d,]*(?:\.\d+)?"
"""A number as a page writes it: U+2212 or + sign, thousands commas, decimals."""

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


# Patterns: a page's text around the number. "{}" is the number captured, "{n}" any other
# number; a space matches any run of white space (prose is wrapped anywhere); a leading "^"
# anchors at the start of a line (a table row).


def pattern(template: str) -> str:
    anchored = template.startswith("^")
    pieces = re.split(r"(\{\}|\{n\}| +)", template[1:] if anchored else template)
    regex = ["^" if anchored else ""]
    for piece in pieces:
        if piece == "{}":
            regex.append(f"({NUMBER})")
        elif piece == "{n}":
            regex.append(NUMBER)
        elif piece.startswith(" "):
            regex.append(r"\s+")
        else:
            regex.append(re.escape(piece))
    found = "".join(regex)
    if re.compile(found).groups != 1:
        raise ValueError(f"{template!r}: one {{}} expected")
    return found


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
    regex: str
    value: Callable[[Results], float]
    format: Callable[[float], str]
    page: str = RESULTS_PAGE
    """The page of ``PAGES`` the number is quoted on."""

    def text(self, results: Results) -> str:
        return self.format(self.value(results))


# The entries, page by page in the order of ``PAGES``, each in the page's order.

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
    """Mean m̃ (K = 10) over the pairs of distinct tokens, every prompt."""
    import polars as pl

    def value(r: Results) -> float:
        frame = r.rows(f"{COUPLING}/tokens.csv", weights=weights, kind=kind, k=10, metric="paper")
        return frame.filter(pl.col("token_a") != pl.col("token_b"))["miscoupling"].mean()

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


def nth(template: str, index: int) -> str:
    """``template`` with its ``index``-th ``{}`` captured and every other one any number."""
    pieces = template.split("{}")
    return "".join(
        piece + ("" if i == len(pieces) - 1 else "{}" if i == index else "{n}")
        for i, piece in enumerate(pieces)
    )


def _entries() -> Iterator[Entry]:
    def entry(name, template, value, format_, page=RESULTS_PAGE):
        return Entry(name, pattern(template), value, format_, page)

    # README.md's headline: the law on wiki-science and wiki-culture (the law table's numbers),
    # and the small Llama's next-token r at steps 0 and 800 on the dataset the headline figure
    # draws (docs/headline.py), wiki-science.
    science = "(ρ = {}, PR from {} at layer 1 to {} at layer 30)"
    for name, template, value, format_ in (
        (
            "law.wiki-science.next.r",
            "Pearson r = {} on `wiki-science`",
            _law("pearson", "wiki-science", "next"),
            fixed(3),
        ),
        (
            "law.wiki-science.next.rho",
            nth(science, 0),
            _law("rho", "wiki-science", "next"),
            fixed(4),
        ),
        (
            "law.wiki-science.next.pr_first",
            nth(science, 1),
            _law("pr_first", "wiki-science", "next"),
            fixed(3),
        ),
        (
            "law.wiki-science.next.pr_last",
            nth(science, 2),
            _law("pr_last", "wiki-science", "next"),
            fixed(3),
        ),
        (
            "law.wiki-culture.next.r",
            "and {} on `wiki-culture` (the paper reports",
            _law("pearson", "wiki-culture", "next"),
            fixed(3),
        ),
        (
            "series.step0.wiki-science.pearson",
            "(step 0, r = {})",
            _series(0, "pearson", "wiki-science"),
            fixed(3),
        ),
        (
            "series.step800.wiki-science.pearson",
            "after 800 steps (r = {})",
            _series(800, "pearson", "wiki-science"),
            fixed(3),
        ),
    ):
        yield entry(f"headline.{name}", template, value, format_, page=README)

    # The probing datasets.
    for index, dataset in enumerate(("wiki-science", "wiki-culture")):
        tokens = f"tokens/{SMOLLM2}/{dataset}.parquet"
        pr = f"equilearning/{SMOLLM2}/{dataset}/pr.csv"
        yield entry(
            f"tokens.{dataset}",
            nth("truncated to 128 tokens: {} and {} tokens,", index),
            lambda r, tokens=tokens: r.table(tokens).height,
            count,
        )
        yield entry(
            f"rows.{dataset}",
            nth("tokens, {} and {} next-token regression rows", index),
            lambda r, pr=pr: r.one(pr, "n_rows", layer=0, offset=1, norm="model", control="none"),
            count,
        )

    # The law table and the prose after it.
    rows = {
        ("wiki-science", "next"): "| wiki-science | next token (+1) |",
        ("wiki-culture", "next"): "| wiki-culture | next token (+1) |",
        ("wiki-science", "next_next"): "| wiki-science | next-next token (+2) |",
        ("wiki-science", "current"): "| wiki-science | current token (0) |",
        ("wiki-science", "previous"): "| wiki-science | previous token (−1) |",
    }
    columns = (
        ("r", "pearson", signed(3)),
        ("rho", "rho", fixed(4)),
        ("pr_first", "pr_first", fixed(3)),
        ("pr_last", "pr_last", fixed(3)),
    )
    for (dataset, target), row in rows.items():
        for cell, (name, column, format_) in enumerate(columns):
            yield entry(
                f"law.{dataset}.{target}.{name}",
                "^" + row + nth(" {} |" * len(columns), cell),
                _law(column, dataset, target),
                format_,
            )
    for index, (name, control) in enumerate(
        (("shuffled_vocab.decay", "shuffled_vocab"), ("decay", "none"))
    ):
        yield entry(
            f"law.wiki-science.next.{name}",
            nth("(PR_30/PR_1 = {} against {};", index),
            _law("overall_decay", "wiki-science", "next", control=control),
            fixed(3),
        )
    for norm, template in (
        ("standardize", "(r = {} with `model` or `standardize`"),
        ("none", "`standardize`, {} with `none`)"),
    ):
        yield entry(
            f"law.wiki-science.next.{norm}.r",
            template,
            _law("pearson", "wiki-science", "next", norm=norm),
            fixed(3),
        )

    # Separation fuzziness.
    for name, template, value in (
        ("classes", "He & Su's code: {} classes over", _fuzziness("n_classes", 1)),
        ("rows", "classes over the {} `wiki-science` rows", _fuzziness("n_rows", 1)),
        (
            "one_row_classes",
            "`wiki-science` rows, {} of them of one row",
            lambda r: (_next_token_classes(r) == 1).sum(),
        ),
        (
            "first",
            "from D = {} at layer 1 to",
            _fuzziness_law("fuzziness_first", SMOLLM2, "wiki-science"),
        ),
        (
            "last",
            "at layer 1 to {} at layer 30, but less regularly",
            _fuzziness_law("fuzziness_last", SMOLLM2, "wiki-science"),
        ),
        (
            "frequent_classes",
            "Counted over the {} next tokens with at least 20 rows",
            lambda r: _frequent(r).len(),
        ),
        ("frequent_rows", "at least 20 rows only ({} rows;", lambda r: _frequent(r).sum()),
    ):
        yield entry(f"fuzziness.wiki-science.{name}", template, value, count)
    for dataset, template in (
        ("wiki-science", "fit has r = {}, ρ = {} on `wiki-science`"),
        ("wiki-culture", "({}, {} on `wiki-culture`)"),
    ):
        for index, column in enumerate(("pearson", "rho")):
            yield entry(
                f"fuzziness.{dataset}.{column}",
                nth(template, index),
                _fuzziness_law(column, SMOLLM2, dataset),
                fixed(3),
            )
    yield entry(
        "fuzziness.against_pr.r",
        "`wiki-culture`), against r = {} for PR",
        _law("pearson", "wiki-science", "next"),
        fixed(3),
    )
    for index, rank in enumerate((1, 2)):
        yield entry(
            f"best.smollm2-135m.rank{rank}.r",
            nth("best probing set (r {} against {})", index),
            _best(rank),
            fixed(4),
        )

    # Signatures.
    yield entry(
        "signatures.wikipedia.texts",
        "Over all {} Wikipedia summaries",
        lambda r: sum(_texts(r, d) for d in ("wiki-science", "wiki-culture", "wiki-other")),
        count,
    )
    summary = f"signatures/{SMOLLM2}/wikipedia/summary.json"
    template = "`wiki-other`: {} text tokens, {} distinct, {} bigrams),"
    for index, key in enumerate(("corpus_text_tokens", "distinct_tokens", "bigrams")):
        yield entry(
            f"signatures.wikipedia.{key}",
            nth(template, index),
            lambda r, key=key: r.json(summary)[key],
            count,
        )
    for matrix, signature, label in (
        ("W_E", "next", "cos(W_E) vs cos(φ_next)"),
        ("W_U", "pre", "cos(W_U) vs cos(φ_pre)"),
        ("W_E", "tilde", "cos(W_E) vs cos(φ̃)"),
        ("W_U", "tilde", "cos(W_U) vs cos(φ̃)"),
    ):
        yield entry(
            f"rcos.wikipedia.{matrix}.{signature}",
            f"^| {label} | {{}} |",
            lambda r, m=matrix, s=signature: r.one(
                f"signatures/{SMOLLM2}/wikipedia/rcos.csv", "r_cos", matrix=m, signature=s
            ),
            fixed(3),
        )
    percentiles = f"signatures/{SMOLLM2}/wikipedia/percentiles.csv"
    for index, decile in enumerate((1, 10)):
        yield entry(
            f"percentiles.wikipedia.W_E.next.decile{decile}.mean",
            nth("from {} in the lowest to {} in the highest decile", index),
            lambda r, d=decile: r.one(
                percentiles, "mean", matrix="W_E", signature="next", decile=d
            ),
            fixed(1),
        )
    yield entry(
        "rcos.wikipedia.W_E.next.c2000",
        "at C = 500, {} at 2,000,",
        _rcos("W_E", "next"),
        fixed(3),
    )
    yield entry(
        "signatures.wikipedia.count_of_10000th_token",
        "the rarest compared token occurs only {} times",
        lambda r: _count_of_rank(r, 10_000),
        count,
    )
    corpora = ("wiki-science", "wiki-culture", "wiki-other", "wikipedia")
    for index, corpus in enumerate(corpora):
        yield entry(
            f"rcos_by_corpus.{corpus}.W_E.next",
            nth(
                "R_cos(W_E, φ_next) is {} on `wiki-science`, {} on `wiki-culture`, {} on "
                "`wiki-other` and {} on all of them",
                index,
            ),
            _rcos("W_E", "next", corpus),
            fixed(3),
        )
        yield entry(
            f"rcos_by_corpus.{corpus}.W_U.pre",
            nth("all of them; R_cos(W_U, φ_pre) {}, {}, {} and {}.", index),
            _rcos("W_U", "pre", corpus),
            fixed(3),
        )

    # Synthetic addition tasks: the table (F_lin, F_ffn: R_order ± sd, train accuracy; the
    # distinct signature's R_order, keys only / Eq. 4 as written).
    tasks = {"add": "f_add", "add_same_range": "f̃_add", "mod": "f_mod"}
    cells = " {} ± {} | {} | {} ± {} | {} |"
    columns = (
        ("linear", "r_order_mean", "r_order"),
        ("linear", "r_order_sd", "r_order_sd"),
        ("linear", "train_accuracy", "train_accuracy"),
        ("ffn", "r_order_mean", "r_order"),
        ("ffn", "r_order_sd", "r_order_sd"),
        ("ffn", "train_accuracy", "train_accuracy"),
    )
    for task, label in tasks.items():
        for index, (model, column, name) in enumerate(columns):
            yield entry(
                f"synthetic.{task}.{model}.{name}",
                f"^| {label} |" + nth(cells, index),
                _synthetic(task, model, column),
                fixed(2) if column == "train_accuracy" else fixed(3),
            )
    # φ^y counts no inputs x′: keys only and Eq. 4 as written are the same signature.
    for name, task, signature, template in (
        ("add.label.r_order.keys", "add", "label", "| φ^y ({} / {n}) |"),
        ("add.label.r_order", "add", "label", "| φ^y ({n} / {}) |"),
        ("add_same_range.context.r_order", "add_same_range", "context", "| φ^X ({n} / {}) |"),
        (
            "mod.context_given_label.r_order",
            "mod",
            "context_given_label",
            "| φ^(X\\|y) only ({n} / {}) |",
        ),
    ):
        yield entry(f"synthetic.{name}", template, _signature(task, signature), signed(3))
    yield entry(
        "synthetic.mod.linear.train_accuracy.percent",
        "(the linear model stays at {} %",
        _synthetic("mod", "linear", "train_accuracy"),
        percent(0),
    )
    for index, task in enumerate(("add_same_range", "add")):
        yield entry(
            f"synthetic.{task}.linear.epoch1.r_order",
            nth("(R_order {} against {} after one epoch", index),
            _first_epoch_r_order(task, "linear"),
            fixed(2),
        )
    for name, template, value, format_ in (
        (
            "add.linear.alignment_label",
            "of φ^y at {} for f_add",
            _synthetic("add", "linear", "alignment_label"),
            fixed(2),
        ),
        (
            "add_same_range.linear.alignment_label",
            "for f̃_add (φ^y {}),",
            _synthetic("add_same_range", "linear", "alignment_label"),
            fixed(2),
        ),
        (
            "mod.label.min_cosine",
            "(smallest cosine {})",
            _signature("mod", "label", "min_cosine"),
            fixed(2),
        ),
        (
            "add.context.min_cosine",
            "({}–{n} in the {n} training pairs drawn)",
            _signature("add", "context", "min_cosine"),
            fixed(2),
        ),
        (
            "add.context.max_cosine",
            "({n}–{} in the {n} training pairs drawn)",
            lambda r: (
                _signature("add", "context", "min_cosine")(r)
                + _signature("add", "context", "cosine_spread")(r)
            ),
            fixed(2),
        ),
        ("training_pairs", "in the {} training pairs drawn)", _training_pairs, count),
        (
            "add_same_range.context.r_order.prose",
            "(R_order {}; it does on the exact distribution",
            _signature("add_same_range", "context"),
            signed(2),
        ),
        (
            "alignment_context_given_label.min",
            "φ^(X|y) instead ({}–{n} for every task",
            lambda r: _alignment_range(r, "min"),
            fixed(2),
        ),
        (
            "alignment_context_given_label.max",
            "φ^(X|y) instead ({n}–{} for every task",
            lambda r: _alignment_range(r, "max"),
            fixed(2),
        ),
        (
            "add_same_range.ffn.alignment_context",
            "and with φ^X at {} for F_ffn on f̃_add, so",
            _synthetic("add_same_range", "ffn", "alignment_context"),
            fixed(2),
        ),
    ):
        yield entry(f"synthetic.{name}", template, value, format_)

    # Block coupling.
    for prompt in range(3):
        yield entry(
            f"coupling.prompt{prompt}.tokens",
            nth("texts ({}, {} and {} tokens)", prompt),
            _prompt_tokens(prompt),
            count,
        )
    ks = (10, 30, 50)
    for weights, label in (("trained", "trained"), ("random", "random initialisation")):
        for index, k in enumerate(ks):
            yield entry(
                f"coupling.depth.paper.k{k}.{weights}",
                f"^| {label} |" + nth(" {} |" * len(ks), index),
                _depth(weights, k),
                fixed(3),
            )
    metrics = {
        "paper": "| `paper` (Eq. 14, m̃) |",
        "unnormalised": "| `unnormalised` (Eq. 13, m) |",
        "released_norm": "| `released_norm` |",
        "released_norm_swapped": "| `released_norm_swapped` |",
        "released_trace": "| `released_trace` |",
        "released_trace_swapped": "| `released_trace_swapped` |",
    }
    for metric, row in metrics.items():
        for index, (k, weights) in enumerate((k, w) for k in ks for w in ("trained", "random")):
            yield entry(
                f"coupling.metrics.{metric}.k{k}.{weights}",
                "^" + row + nth(" {} / {} |" * len(ks), index),
                _depth(weights, k, metric),
                fixed(3),
            )
    template = "m̃ {} at distance 1, {} at 10, {} at 29; random {}, {}, {})"
    for index, (weights, distance) in enumerate(
        (w, d) for w in ("trained", "random") for d in (1, 10, 29)
    ):
        yield entry(
            f"coupling.depth.paper.k10.{weights}.distance{distance}",
            nth(template, index),
            _depth(weights, 10, distance=distance),
            fixed(3),
        )
    template = "σ_1 {} at block 1, {} at 15, {} at 30; random {}, {}, {})"
    for index, (weights, layer) in enumerate(
        (w, layer) for w in ("trained", "random") for layer in (1, 15, 30)
    ):
        yield entry(
            f"coupling.sigma1.{weights}.layer{layer}",
            nth(template, index),
            _top_singular_value(weights, layer),
            significant(2),
        )
    template = (
        "(m̃ {} self, {} fixed output, {} fixed input, K = 10) while the trained model's "
        "differ more ({}, {}, {})"
    )
    for index, (weights, kind) in enumerate(
        (w, kind) for w in ("random", "trained") for kind in ("self", "fixed_output", "fixed_input")
    ):
        yield entry(
            f"coupling.tokens.layer15.{kind}.{weights}",
            nth(template, index),
            _token_wise(weights, kind),
            fixed(2),
        )

    # Trajectories.
    yield entry(
        "trajectories.tokens",
        "**Trajectories** ({} tokens,",
        lambda r: r.rows(f"{TRAJECTORIES}/tokens.csv", weights="trained").height,
        count,
    )
    template = (
        "line-shape score mean {} (median {}, quartiles {}–{}) trained against {} (median {}, "
        "{}–{}) random"
    )
    statistics = ("mean", "median", "q25", "q75")
    for index, (weights, statistic) in enumerate(
        (w, s) for w in ("trained", "random") for s in statistics
    ):
        yield entry(
            f"trajectories.lss.{weights}.{statistic}",
            nth(template, index),
            _trajectory(weights, "lss", statistic),
            fixed(2),
        )
    template = "norm grows from {} (x^0) to {} (x^29) and the final RMSNorm brings it back to {},"
    for index, (layer, format_) in enumerate(
        ((0, significant(2)), (29, count), (30, significant(2)))
    ):
        yield entry(
            f"trajectories.norm.trained.layer{layer}.median",
            nth(template, index),
            _layers("trained", "norm", layer, "median"),
            format_,
        )
    template = "ED is {} (median {}, {}–{}) against {} (median {}) random"
    for index, (weights, statistic) in enumerate(
        [("trained", s) for s in statistics] + [("random", "mean"), ("random", "median")]
    ):
        yield entry(
            f"trajectories.expodistance.{weights}.{statistic}",
            nth(template, index),
            _trajectory(weights, "expodistance", statistic),
            significant(3),
        )
    template = "(Fig. 23) is {} (mean; median {}) trained against {} random,"
    for index, (weights, statistic) in enumerate(
        (("trained", "mean"), ("trained", "median"), ("random", "mean"))
    ):
        yield entry(
            f"trajectories.equidistance_cv.{weights}.{statistic}",
            nth(template, index),
            _trajectory(weights, "equidistance_cv", statistic),
            fixed(2),
        )
    yield entry(
        "trajectories.tokens_with_next",
        "next-token loss over the {} tokens",
        _tokens_with_next,
        count,
    )
    template = (
        "a next token is {} nats at block 1, still {} at block 22, and falls to {} at block 29 "
        "and {} at the output"
    )
    for index, layer in enumerate((1, 22, 29, 30)):
        yield entry(
            f"trajectories.lens_loss.trained.layer{layer}",
            nth(template, index),
            _layers("trained", "next_token_loss", layer),
            fixed(1),
        )
    template = "stays low ({}–{} nats from block 1 to 22, {} at the output)"
    for index, (name, value) in enumerate(
        (
            ("blocks1-22.min", _lens_entropy_range("min")),
            ("blocks1-22.max", _lens_entropy_range("max")),
            ("layer30", _layers("trained", "logit_entropy", 30)),
        )
    ):
        yield entry(
            f"trajectories.lens_entropy.trained.{name}", nth(template, index), value, fixed(1)
        )
    yield entry(
        "trajectories.lens_entropy.random.layer30",
        "near uniform ({} nats;",
        _layers("random", "logit_entropy", 30),
        fixed(2),
    )

    # Token views.
    template = "{} `they` and {} `them`, {} `have` and {} `had`, {} `is` and {} `are`"
    for index, word in enumerate(("they", "them", "have", "had", "is", "are")):
        yield entry(
            f"token_views.wiki-science.{word}", nth(template, index), _view_count(word), count
        )

    # Training from scratch and the series.
    template = "({} parameters, {} of them the tied embeddings"
    for index, (name, value) in enumerate(
        (("parameters", _series(0, "parameters")), ("embedding_parameters", _embedding_parameters))
    ):
        yield entry(f"training.{name}", nth(template, index), value, count)
    template = "the {} summaries that neither probing dataset sampled ({} tokens in {} sequences"
    for index, key in enumerate(("texts", "corpus_tokens", "sequences")):
        yield entry(f"training.{key}", nth(template, index), _training(key), count)
    yield entry("training.epochs", "8 sequences ({} epochs,", _epochs, fixed(2))
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
        for index, (column, format_) in enumerate(table):
            yield entry(
                f"series.step{step}.{column}",
                f"^| {step} |" + nth(" {} |" * len(table), index),
                _series(step, column),
                format_,
            )
    evaluation = f"evaluation/{SMOLLM2}/wiki-science.csv"
    for name, template, value, format_ in (
        ("series.step800.loss.prose", "falls to {} nats (", _series(800, "loss"), fixed(2)),
        (
            "training.step800.held_out_loss",
            "nats ({} on the {n} held-out sequences",
            _checkpoint_held_out(800),
            fixed(2),
        ),
        (
            "training.held_out_sequences",
            "nats ({n} on the {} held-out sequences",
            _training("held_out_sequences"),
            count,
        ),
        (
            "training.held_out_unigram_loss",
            "far below the {} nats of the best",
            _training("held_out_unigram_loss"),
            fixed(2),
        ),
        (
            "training.unigram_entropy",
            "unigram entropy is {})",
            _training("unigram_entropy"),
            fixed(2),
        ),
        (
            "series.step800.accuracy.percent",
            "accuracy rises to {} %",
            _series(800, "accuracy"),
            percent(0),
        ),
        (
            "evaluation.smollm2-135m.wiki-science.loss",
            "(SmolLM2: {} nats, {n} %)",
            lambda r: r.table(evaluation)["loss"][0],
            fixed(2),
        ),
        (
            "evaluation.smollm2-135m.wiki-science.accuracy.percent",
            "(SmolLM2: {n} nats, {} %)",
            lambda r: r.table(evaluation)["accuracy"][0],
            percent(1),
        ),
    ):
        yield entry(name, template, value, format_)
    template = (
        "(r = {} on `wiki-science`, {} on `wiki-culture`), after 50 steps it does (r = {}, {}), "
        "and at the end r = {} and {},"
    )
    for index, (step, dataset) in enumerate(
        (s, d) for s in (0, 50, 800) for d in ("wiki-science", "wiki-culture")
    ):
        yield entry(
            f"series.step{step}.{dataset}.pearson",
            nth(template, index),
            _series(step, "pearson", dataset),
            signed(2) if step == 0 else fixed(2 if step == 50 else 3),
        )
    template = "(PR_8 / PR_1 = {}; SmolLM2 {} over 30)"
    for index, (name, value) in enumerate(
        (
            ("series.step800.overall_decay", _series(800, "overall_decay")),
            ("law.wiki-science.next.decay.prose", _law("overall_decay", "wiki-science", "next")),
        )
    ):
        yield entry(name, nth(template, index), value, fixed(3))
    template = (
        "(r = {} on `wiki-science`, {} on `wiki-culture`), where PR does not, rises at step 10 "
        "(r = {}, {}) and falls again from step 50 on (r = {} and {} at step 800)"
    )
    for index, (step, dataset) in enumerate(
        (s, d) for s in (0, 10, 800) for d in ("wiki-science", "wiki-culture")
    ):
        yield entry(
            f"series.step{step}.{dataset}.fuzziness.pearson",
            nth(template, index),
            _fuzziness_law("pearson", f"wiki-llama@step{step}", dataset),
            fixed(3, plus=step == 10),
        )
    template = "goes from {} to {} (R_cos(W_U, φ_pre) peaks at {} at step 200 and ends at {};"
    for index, (step, column, format_) in enumerate(
        (
            (0, "rcos_we_next", fixed(0)),
            (800, "rcos_we_next", fixed(2)),
            (200, "rcos_wu_pre", fixed(3)),
            (800, "rcos_wu_pre", fixed(3)),
        )
    ):
        yield entry(
            f"series.step{step}.{column}.prose",
            nth(template, index),
            _series(step, column),
            format_,
        )
    template = (
        "unrelated matrices ({} against √(1 − 1/10) = 0.949), falls to {} by step 50 and climbs "
        "back to {} by step 800"
    )
    for index, (step, format_) in enumerate(((0, fixed(3)), (50, fixed(2)), (800, fixed(2)))):
        yield entry(
            f"series.step{step}.miscoupling_offdiagonal_k10.prose",
            nth(template, index),
            _series(step, "miscoupling_offdiagonal_k10"),
            format_,
        )
    for index, step in enumerate((0, 50, 800)):
        yield entry(
            f"series.step{step}.miscoupling_all_k10",
            nth("over all pairs, {} → {} → {};", index),
            _series(step, "miscoupling_all_k10"),
            fixed(2),
        )
        yield entry(
            f"series.step{step}.lss_median.prose",
            nth("(median LSS {} → {} → {};", index),
            _series(step, "lss_median"),
            fixed(2),
        )
    for index, step in enumerate((0, 50, 200, 800)):
        yield entry(
            f"series.step{step}.miscoupling_all_k10_unnormalised",
            nth("({} → {} → {} → {} at steps 0, 50, 200, 800)", index),
            _series(step, "miscoupling_all_k10_unnormalised"),
            fixed(2),
        )
    for index, step in enumerate((0, 50, 800)):
        yield entry(
            f"series.step{step}.expodistance_median",
            nth("(median expodistance {} → {} at step 50 → {} at step 800,", index),
            _series(step, "expodistance_median"),
            significant(2),
        )
    for index, column in enumerate(("r2", "p_value")):
        yield entry(
            f"fits.coupling_k10.loss.wiki-science.{column}",
            nth("R² = {}, p = {} on `wiki-science` at K = 10", index),
            _fit(column),
            fixed(2),
        )

    # The representation geometry (equilearning.observers: [geometry]).
    drop = "from layer 11 to layer 12 the effective rank of the uncentred states (RankMe) "
    drop += "falls from {} to {} and the prompt entropy from {} to {} nats"
    for index, (column, layer, format_) in enumerate(
        (
            ("effective_rank", 11, count),
            ("effective_rank", 12, count),
            ("prompt_entropy", 11, fixed(2)),
            ("prompt_entropy", 12, fixed(2)),
        )
    ):
        yield entry(
            f"geometry.layer{layer}.{column}", nth(drop, index), _geometry(column, layer), format_
        )
    yield entry(
        "geometry.layers13to28.least_cka_previous",
        "at least {} from layer 13 to 28",
        _least_cka_previous(13, 28),
        fixed(4),
    )
    yield entry(
        "geometry.layer30.effective_rank",
        "climbs back to {} at layer 30",
        _geometry("effective_rank", 30),
        count,
    )
    for index, layer in enumerate((11, 12, 13)):
        yield entry(
            f"geometry.pr.layer{layer}",
            nth("(PR {}, {}, {} at layers 11, 12 and 13)", index),
            _pr(layer),
            fixed(3),
        )
    for layer, template in (
        (0, "Curvature is {} radians at layer 0"),
        (30, "and {} at layer 30: SmolLM2's"),
    ):
        yield entry(
            f"geometry.layer{layer}.curvature", template, _geometry("curvature", layer), fixed(2)
        )
    for index, step in enumerate(STEPS):
        yield entry(
            f"series.step{step}.effective_rank_last",
            nth("the effective rank goes {} → {} → {} → {} → {} over steps 0, 10", index),
            _series(step, "effective_rank_last"),
            significant(3),
        )
    yield entry(
        "series.step50.anisotropy_last",
        "(anisotropy {}, the mean cosine",
        _series(50, "anisotropy_last"),
        fixed(2),
    )
    for index, step in enumerate((0, 800)):
        yield entry(
            f"series.step{step}.pr_last",
            nth("at the last layer only falls ({} at step 0, {} at step 800)", index),
            _series(step, "pr_last"),
            fixed(2),
        )


ENTRIES: tuple[Entry, ...] = tuple(_entries())


# Checking and rewriting the pages.


def read_pages(root: Path = ROOT) -> dict[str, str]:
    """The text of each page of ``PAGES`` under ``root``, by page."""
    return {page: (Path(root) / page).read_text() for page in PAGES}


def matches(text: str, entry: Entry) -> list[re.Match]:
    return list(re.finditer(entry.regex, text, re.MULTILINE))


def problems(pages: Mapping[str, str], snapshot: dict[str, str], entries=ENTRIES) -> list[str]:
    """Every entry whose pattern does not match exactly once in its page (``pages``: the
    text of each page), or whose number there differs from the snapshot's; and every name
    only one of them has."""
    found = []
    names = {entry.name for entry in entries}
    for name in sorted(set(snapshot) - names):
        found.append(f"{name}: in the snapshot, not an entry of the script")
    for entry in entries:
        if entry.name not in snapshot:
            found.append(f"{entry.name}: not in the snapshot")
            continue
        places = matches(pages[entry.page], entry)
        if len(places) != 1:
            found.append(f"{entry.name}: its pattern matches {len(places)} times in {entry.page}")
        elif places[0].group(1) != snapshot[entry.name]:
            found.append(
                f"{entry.name}: {entry.page} says {places[0].group(1)!r}, "
                f"the snapshot {snapshot[entry.name]!r}"
            )
    return found


def substituted(
    pages: Mapping[str, str], snapshot: dict[str, str], entries=ENTRIES
) -> tuple[dict[str, str], list[str]]:
    """``pages`` (the text of each page) with each entry's number replaced by the snapshot's
    in its page, and the changes made (name: old → new), page by page. An entry that does not
    match exactly once in its page raises."""
    spans = {page: [] for page in pages}
    for entry in entries:
        places = matches(pages[entry.page], entry)
        if len(places) != 1:
            raise ValueError(
                f"{entry.name}: its pattern matches {len(places)} times in {entry.page}"
            )
        spans[entry.page].append((places[0].span(1), entry.name))
    new, changes = {}, []
    for page, text in pages.items():
        found = sorted(spans[page])
        for ((_, end), _), ((start, _), _) in pairwise(found):
            if start < end:
                raise ValueError(f"two entries capture overlapping text in {page}")
        changed = []
        for (start, end), name in reversed(found):
            old, number = text[start:end], snapshot[name]
            if old != number:
                text = text[:start] + number + text[end:]
                changed.append(f"{name}: {old} → {number}")
        new[page] = text
        changes += changed[::-1]
    return new, changes


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
        help=f"the folder of the pages ({', '.join(PAGES)}; default: %(default)s)",
    )
    parser.add_argument(
        "--update-pages", action="store_true", help="write the snapshot's values into the pages"
    )
    parser.add_argument("--check", action="store_true", help="compare the pages with the snapshot")
    arguments = parser.parse_args(argv)
    if not (arguments.write_snapshot or arguments.update_pages or arguments.check):
        parser.error("nothing to do: --write-snapshot, --update-pages or --check")
    if arguments.write_snapshot:
        if arguments.results is None:
            parser.error("--write-snapshot needs the results folder")
        computed = values(arguments.results)
        arguments.write_snapshot.write_text(
            json.dumps(computed, indent=1, ensure_ascii=False) + "\n"
        )
        print(f"{len(computed)} numbers written to {arguments.write_snapshot}")
        arguments.snapshot = arguments.write_snapshot
    snapshot = json.loads(arguments.snapshot.read_text())
    pages = " and ".join(PAGES)
    if arguments.update_pages:
        texts = read_pages(arguments.root)
        new, changes = substituted(texts, snapshot)
        for page, text in new.items():
            if text != texts[page]:
                (arguments.root / page).write_text(text)
        print("\n".join(changes) or f"{pages} already have the snapshot's numbers")
    if arguments.check:
        found = problems(read_pages(arguments.root), snapshot)
        print("\n".join(found) or f"{pages} have the snapshot's {len(snapshot)} numbers")
        return 1 if found else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
