"""The PR table against an independent lstsq computation on the same cached states."""

import numpy as np
import polars as pl
import pytest

from layerlaws.equilearning import prediction_residual_table, target_matrix
from layerlaws.errors import LayerlawsError
from layerlaws.hidden import HiddenStates, extract_hidden_states
from layerlaws.models import load_model, load_tokenizer, prepare_model
from layerlaws.norms import normalize
from layerlaws.tokens import tokenize_sentences

OFFSETS = [-1, 0, 1, 2]


@pytest.fixture(scope="module")
def hidden(llama_folder, texts, tmp_path_factory):
    root = tmp_path_factory.mktemp("equilearning")
    facts = prepare_model({"source": {"kind": "local", "path": str(llama_folder)}}, root / "m")
    sentences = pl.DataFrame(
        {"sentence_id": list(range(60)), "text": texts[:60], "source": ["t"] * 60}
    )
    tokens = tokenize_sentences(sentences, load_tokenizer(root / "m"), max_tokens=20)
    extract_hidden_states(
        load_model(root / "m", "float32", "cpu"),
        facts,
        tokens,
        root / "h",
        16,
        "cpu",
        progress=False,
    )
    return HiddenStates.open(root / "h")


def reference_pr(hidden, layer, offset, norm, shuffled):
    """Build the regression rows by hand (a Python loop over tokens) and solve with lstsq."""
    meta = hidden.metadata
    x = np.asarray(hidden.layer(layer), dtype=np.float64)
    if layer < hidden.num_layers:
        x = normalize(x, norm, meta["norm_type"], meta["norm_eps"])
    permutation = np.random.default_rng(0).permutation(meta["vocab_size"])
    where = {
        (s, p): t
        for s, p, t in hidden.rows.select("sentence_id", "position", "token_id").iter_rows()
    }
    inputs, targets = [], []
    for row, (s, p) in enumerate(hidden.rows.select("sentence_id", "position").iter_rows()):
        if (s, p + offset) in where:
            token = where[(s, p + offset)]
            inputs.append(x[row])
            targets.append(permutation[token] if shuffled else token)
    design = np.hstack([np.array(inputs), np.ones((len(inputs), 1))])
    y = np.array(targets, dtype=np.float64)
    residual = y - design @ np.linalg.lstsq(design, y, rcond=None)[0]
    return (residual**2).sum() / ((y - y.mean()) ** 2).sum(), len(y)


def test_pr_table_matches_lstsq_everywhere(hidden):
    table = prediction_residual_table(
        hidden,
        OFFSETS,
        ["model", "standardize", "none"],
        ["none", "shuffled_vocab"],
        regression_chunk_rows=97,
    )
    assert table.columns == ["layer", "offset", "norm", "control", "pr", "n_rows"]
    assert len(table) == (hidden.num_layers + 1) * 4 * 3 * 2
    for layer in (0, 2, hidden.num_layers):
        for offset in OFFSETS:
            for norm in ("model", "none"):
                for control in ("none", "shuffled_vocab"):
                    expected, n_rows = reference_pr(
                        hidden, layer, offset, norm, control == "shuffled_vocab"
                    )
                    row = table.filter(
                        (pl.col("layer") == layer)
                        & (pl.col("offset") == offset)
                        & (pl.col("norm") == norm)
                        & (pl.col("control") == control)
                    )
                    assert row["n_rows"][0] == n_rows
                    assert row["pr"][0] == pytest.approx(expected, rel=1e-8)


def test_last_layer_is_the_same_under_every_norm(hidden):
    table = prediction_residual_table(hidden, [1], ["model", "none"], ["none"])
    last = table.filter(pl.col("layer") == hidden.num_layers)
    assert last["pr"][0] == last["pr"][1]
    first = table.filter(pl.col("layer") == 1)
    assert first["pr"][0] != first["pr"][1]


def test_targets_never_cross_sequences_or_use_special_tokens():
    rows = pl.DataFrame(
        {
            "sentence_id": [0, 0, 0, 1, 1],
            "position": [1, 2, 3, 1, 2],
            "token_id": [10, 11, 12, 20, 21],
        }
    )
    values, defined = target_matrix(rows, [-1, 1], ["none"], vocab_size=30, shuffle_seed=0)
    assert defined[:, 0].tolist() == [False, True, True, False, True]
    assert defined[:, 1].tolist() == [True, True, False, True, False]
    assert values[:, 1].tolist() == [11, 12, 0, 21, 0]


def test_too_few_rows_is_a_clear_error(hidden, tmp_path):
    few = HiddenStates(hidden.folder, hidden.metadata, hidden.rows.head(10))
    with pytest.raises(LayerlawsError, match="Sample more or longer texts"):
        prediction_residual_table(few, [1], ["model"], ["none"])
