"""`make synthetic-paper`: its config is the paper config's synthetic block, the comparison
with Yao & Xu's statements reads each of them on the right quantity of hand-made records,
and the docs page holds both tables and every figure."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import polars as pl
import yaml

from layerlaws.synthetic.comparison import PAPER_CLAIMS, paper_comparison
from layerlaws.synthetic.workflow import SYNTHETIC_FIGURES

ROOT = Path(__file__).parents[2]
_spec = importlib.util.spec_from_file_location(
    "synthetic_paper", ROOT / "docs" / "synthetic_paper.py"
)
synthetic_paper = sys.modules["synthetic_paper"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(synthetic_paper)


def test_the_config_is_the_paper_config_s_synthetic_block():
    ours = yaml.safe_load((ROOT / "configs/synthetic-paper.yaml").read_text())
    paper = yaml.safe_load((ROOT / "configs/paper.yaml").read_text())
    assert ours["synthetic"] == paper["synthetic"]
    assert set(ours) == {"synthetic", "plots"} and ours["plots"] == {"format": "png"}


# Per task and model: the mean R_order of its two seeds at epochs 0, 1, 10, 100 and the
# final training accuracy of each seed.
ORDERS = {
    ("add", "linear"): [0.0, -0.85, -0.95, -0.97],
    ("add", "ffn"): [0.0, -0.5, -0.9, -0.95],
    ("add_same_range", "linear"): [0.0, -0.3, -0.9, -0.96],
    ("add_same_range", "ffn"): [0.0, -0.2, -0.6, -0.7],
    ("mod", "linear"): [0.0, 0.1, -0.1, 0.3],
    ("mod", "ffn"): [0.0, -0.1, -0.5, -0.9],
}
ACCURACIES = {
    ("add", "linear"): (0.98, 1.0),
    ("add", "ffn"): (1.0, 1.0),
    ("add_same_range", "linear"): (0.8, 0.9),
    ("add_same_range", "ffn"): (1.0, 1.0),
    ("mod", "linear"): (0.1, 0.2),
    ("mod", "ffn"): (0.95, 0.99),
}
EPOCHS = [0, 1, 10, 100]


def _records(pair):
    """Two seeds whose R_order lies 0.02 either side of the pair's mean."""
    rows = []
    for epoch, order in zip(EPOCHS, ORDERS[pair], strict=True):
        for seed, shift in ((0, -0.02), (1, 0.02)):
            accuracy = ACCURACIES[pair][seed] if epoch == EPOCHS[-1] else 0.0
            rows.append(
                {
                    "epoch": epoch,
                    "seed": seed,
                    "r_order": order + shift,
                    "train_accuracy": accuracy,
                    "test_accuracy": math.nan,
                }
            )
    return pl.DataFrame(rows)


def _weights(pair):
    """Final anchor embeddings of two seeds: three anchors at 0°, 10° and 20° (F_lin on
    f_mod: smallest cosine cos 20°), else at 0°, 90° and 180°."""
    degrees = [0, 10, 20] if pair == ("mod", "linear") else [0, 90, 180]
    rows = np.array([[np.cos(np.radians(d)), np.sin(np.radians(d))] for d in degrees])
    return {"anchor_embeddings": np.stack([rows, rows])[None], "snapshot_epoch": np.array(10)}


def test_each_statement_is_read_on_its_quantity():
    table = paper_comparison({p: _records(p) for p in ORDERS}, {p: _weights(p) for p in ORDERS})
    assert table.height == len(PAPER_CLAIMS)
    expected = [
        # (ours, holds) in PAPER_CLAIMS's order
        (0.99, True),  # F_lin learns f_add
        (0.85, False),  # F_lin learns f̃_add: 0.85 < 0.9
        (0.15, True),  # F_lin fails f_mod
        (0.97, True),  # F_ffn fits f_mod
        (-0.97, True),  # f_add ordered, F_lin
        (-0.95, True),  # f_add ordered, F_ffn
        (-0.96, True),  # f̃_add ordered, F_lin
        (-0.7, False),  # f̃_add ordered, F_ffn
        (10.0, True),  # f̃_add orders later than f_add, F_lin (10 > 1)
        (math.nan, True),  # F_ffn: f̃_add never orders, f_add at epoch 10
        (np.cos(np.radians(20)), True),  # f_mod's anchors aligned in F_lin
        (-0.9, True),  # f_mod ordered in F_ffn
        (100.0, True),  # f_mod in F_ffn orders later than f_add (100 > 10)
        (-0.95, True),  # Fig. 8 (epoch 10): f_add ordered in F_lin
        (-0.9, True),  # Fig. 8: f̃_add
        (-0.1, True),  # Fig. 8: f_mod chaotic
    ]
    np.testing.assert_allclose(table["ours"].to_numpy(), [value for value, _ in expected])
    assert table["holds"].to_list() == [holds for _, holds in expected]
    np.testing.assert_allclose(
        table["ours_sd"].to_numpy()[[0, 4, 10]], [np.std([0.98, 1.0], ddof=1), 0.04 / 2**0.5, 0]
    )
    assert table["criterion"][9] == "later than f_add's (10)"
    assert set(table["epochs"]) == {100}


def test_claims_of_tasks_not_trained_are_left_out():
    pairs = [("mod", "linear"), ("mod", "ffn")]
    table = paper_comparison({p: _records(p) for p in pairs}, {p: _weights(p) for p in pairs})
    # Both accuracies, F_lin's alignment, F_ffn's order and Fig. 8's F_lin; not "later than
    # f_add", which was not trained.
    assert table["task"].to_list() == ["mod"] * 5
    assert not table["criterion"].str.starts_with("later").any()
    empty = paper_comparison({}, {})
    assert empty.height == 0 and "holds" in empty.columns


def test_the_page_holds_both_tables_and_every_figure(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    paper_comparison({p: _records(p) for p in ORDERS}, {p: _weights(p) for p in ORDERS}).write_csv(
        results / "paper_comparison.csv"
    )
    pl.DataFrame(
        {
            "task": ["mod"],
            "model": ["ffn"],
            "epoch": [1000],
            "seeds": [3],
            "r_order_mean": [-0.9123],
            "r_order_sd": [0.0101],
            "train_accuracy": [0.97],
            "alignment_label": [math.nan],
            "alignment_context": [0.1],
            "alignment_context_given_label": [0.9],
        }
    ).write_csv(results / "summary.csv")
    for name in SYNTHETIC_FIGURES:
        (results / f"{name}.png").write_bytes(name.encode())
    synthetic_paper.main(results, tmp_path / "docs" / "synthetic-paper.md")
    text = (tmp_path / "docs" / "synthetic-paper.md").read_text()
    assert "1,000 epochs, 3 seeds" in text
    assert "| f_mod | F_ffn | −0.912 ± 0.010 | 0.970 | — / 0.100 / 0.900 |" in text
    assert "φ^(X\\|y)" in text
    assert text.count("| **no** |") == 2 and "≤ −0.8" in text
    for name in SYNTHETIC_FIGURES:
        assert f"](synthetic-paper/{name}.png)" in text
        assert (tmp_path / "docs" / "synthetic-paper" / f"{name}.png").read_bytes() == name.encode()
