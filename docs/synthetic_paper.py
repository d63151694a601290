"""The page of Yao & Xu's addition tasks trained on the paper's schedule
(docs/synthetic-paper.md), from the results of `make synthetic-paper`: its comparison with
the paper's statements and its summary, as tables, and its figures, copied beside the page.

    python docs/synthetic_paper.py results/synthetic-paper/results/synthetic docs/synthetic-paper.md

The figures go to the folder named as the page without its suffix (docs/synthetic-paper/).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import polars as pl

from layerlaws.core.atomic import atomic_path
from layerlaws.synthetic.plots import MODEL_LABELS, TASK_LABELS
from layerlaws.synthetic.workflow import SYNTHETIC_FIGURES

FIGURES = {
    "dynamics": "training accuracy and R_order over training (Figs. 1B, 2B)",
    "embeddings": "cos(W_E) of the anchors over training (Fig. 2A)",
    "signatures": "signature cosines across anchors; PCA beside F_ffn's W_E (Fig. 3)",
    "unembedding": "cos(W_U) beside cos(φ^X_ν) (Figs. 4A–B, 9A)",
    "distinct_signatures": "the distinct signature of the first and last anchor (Fig. 1A)",
    "signature_profiles": "every signature against the token (Fig. 7)",
    "unembedding_pca": "PCA of φ^X_ν beside F_lin's W_U (Fig. 4C)",
    "embedding_pca": "PCA of F_lin's anchor embeddings (Fig. 8)",
    "ffn_unembedding_pca": "PCA of F_ffn's W_U over the labels (Fig. 9B)",
}
"""What each figure of the stage shows, with the paper's figure."""


def _number(value: float, sd: float | None = None) -> str:
    """A value (± its sd) with three decimals and a U+2212 minus; whole numbers as such."""
    if value != value:  # NaN
        return "—"
    text = f"{value:.0f}" if float(value).is_integer() and abs(value) > 1 else f"{value:.3f}"
    if sd is not None and sd == sd:
        text += f" ± {sd:.3f}"
    return text.replace("-", "\N{MINUS SIGN}")


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        _row(header),
        "|" + "---|" * len(header),
        *(_row(row) for row in rows),
    ]


def _row(cells: list[str]) -> str:
    """A Markdown table row, its cells' bars escaped."""
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def page(results: Path, figures: str) -> str:
    """The page's Markdown, from the stage's folder ``results``, its figures in the
    folder ``figures`` relative to the page."""
    comparison = pl.read_csv(results / "paper_comparison.csv")
    summary = pl.read_csv(results / "summary.csv")
    epochs, seeds = int(summary["epoch"].max()), int(summary["seeds"].max())
    lines = [
        "# Yao & Xu's addition tasks on the paper's schedule",
        "",
        "Written by `make synthetic-paper` (`docs/synthetic_paper.py`) from "
        "`results/synthetic-paper/results/synthetic/`: the three composite addition tasks "
        "with F_lin and F_ffn trained as Yao & Xu's §5 and Appendix A state (d = 200, "
        f"50,000 pairs, batches of 100, AdamW at 1e-5), {epochs:,} epochs, {seeds} seeds "
        "(`configs/synthetic-paper.yaml`, the synthetic block of `configs/paper.yaml`). "
        "The default run's 10 epochs at 1e-3 are in [What the default run finds](results.md).",
        "",
        "## Against the paper",
        "",
        "The paper gives these results as curves and heatmaps only, with no number in its "
        "text; each statement is read with the criterion beside it "
        "(`layerlaws/synthetic/comparison.py`, `paper_comparison.csv`).",
        "",
        *_table(
            ["where", "the paper says", "task", "model", "ours", "criterion", "holds"],
            [
                [
                    row["where"],
                    row["paper_says"],
                    TASK_LABELS[row["task"]],
                    MODEL_LABELS[row["model"]],
                    f"{row['quantity']}: {_number(row['ours'], row['ours_sd'])}",
                    row["criterion"].replace("-", "\N{MINUS SIGN}"),
                    "yes" if row["holds"] else "**no**",
                ]
                for row in comparison.iter_rows(named=True)
            ],
        ),
        "",
        f"## Per task and model at epoch {epochs:,} (`summary.csv`)",
        "",
        *_table(
            ["task", "model", "R_order", "training accuracy", "alignment φ^y / φ^X / φ^(X|y)"],
            [
                [
                    TASK_LABELS[row["task"]],
                    MODEL_LABELS[row["model"]],
                    _number(row["r_order_mean"], row["r_order_sd"]),
                    _number(row["train_accuracy"]),
                    " / ".join(
                        _number(row[f"alignment_{name}"])
                        for name in ("label", "context", "context_given_label")
                    ),
                ]
                for row in summary.iter_rows(named=True)
            ],
        ),
        "",
        "## Figures",
        "",
    ]
    for name in SYNTHETIC_FIGURES:
        lines += [f"**{FIGURES[name]}**", "", f"![{name}]({figures}/{name}.png)", ""]
    return "\n".join(lines)


def main(results: Path, target: Path) -> None:
    folder = target.with_suffix("")
    folder.mkdir(parents=True, exist_ok=True)
    for name in SYNTHETIC_FIGURES:
        shutil.copyfile(results / f"{name}.png", folder / f"{name}.png")
    with atomic_path(target) as temporary:
        temporary.write_text(page(results, folder.name), encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
