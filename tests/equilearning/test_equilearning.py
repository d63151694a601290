"""The PR table streamed from the forward pass against float64 numpy.linalg.lstsq on the
same rows, built by hand from the states kept by the same pass."""

from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
from lstsq_reference import reference_pr

from layerlaws.core.errors import LayerlawsError
from layerlaws.equilearning.statistics import (
    EquilearningStatistics,
    check_enough_rows,
    present_ids,
    shuffled_maps,
    target_ids,
    target_matrix,
)
from layerlaws.forward.kept_states import HiddenStates
from layerlaws.forward.kept_writer import HiddenStateWriter
from layerlaws.forward.model_pass import observed_tokens, run_forward_pass, text_rows
from layerlaws.models.loading import load_model, load_tokenizer
from layerlaws.models.preparation import prepare_model
from layerlaws.text.tokens import tokenize_sentences

OFFSETS = [-1, 0, 1, 2]
NORMS = ["model", "standardize", "none"]
CONTROLS = ["none", "shuffled_vocab"]


def measured(
    folder, texts, root, batch_size, keep=True, special_tokens="exclude", shuffle="vocabulary"
):
    """(facts, tokens, statistics, kept states) of one pass over ``texts``, the
    ``shuffled_vocab`` control under ``shuffle``."""
    facts = prepare_model({"source": {"kind": "local", "path": str(folder)}}, root / "m")
    sentences = pl.DataFrame(
        {"sentence_id": list(range(len(texts))), "text": texts, "source": ["t"] * len(texts)}
    )
    tokens = observed_tokens(
        tokenize_sentences(sentences, load_tokenizer(root / "m"), max_tokens=20), special_tokens
    )
    present = present_ids(tokens, OFFSETS) if shuffle == "present" else None
    statistics = EquilearningStatistics(facts, OFFSETS, NORMS, CONTROLS, 0, present)
    observers = [statistics]
    if keep:
        writer = HiddenStateWriter(root / "h", facts, text_rows(tokens), "float32", 333)
        observers.append(writer)
    model = load_model(root / "m", "float32", "cpu")
    report = run_forward_pass(model, facts, tokens, observers, batch_size, "cpu", progress=False)
    if keep:
        writer.finish(report)
        return facts, tokens, statistics, HiddenStates.open(root / "h")
    return facts, tokens, statistics, None


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def pass_(request, llama_folder, gpt2_folder, texts, tmp_path_factory):
    folder = llama_folder if request.param == "llama" else gpt2_folder
    return measured(folder, texts[:60], tmp_path_factory.mktemp(request.param), batch_size=16)


def test_streamed_pr_matches_lstsq_for_every_layer_offset_norm_and_control(pass_):
    _, _, statistics, hidden = pass_
    table = statistics.table()
    assert table.columns == ["layer", "offset", "norm", "control", "pr", "n_rows"]
    assert len(table) == (hidden.num_layers + 1) * len(OFFSETS) * len(NORMS) * len(CONTROLS)
    for row in table.iter_rows(named=True):
        expected, n_rows = reference_pr(
            hidden, row["layer"], row["offset"], row["norm"], row["control"] == "shuffled_vocab"
        )
        assert row["n_rows"] == n_rows
        assert row["pr"] == pytest.approx(expected, abs=1e-9), row


def test_special_tokens_included_as_he_and_su(llama_folder, texts, tmp_path):
    """``include``: BOS is a row too (every 1 ≤ t ≤ T−1 predicts t+1); the PR still matches
    lstsq on the kept rows, which now start with each sequence's BOS."""
    _, tokens, statistics, hidden = measured(
        llama_folder, texts[:20], tmp_path, 8, special_tokens="include"
    )
    table = statistics.table()
    bos = load_tokenizer(tmp_path / "m").bos_token_id
    first = hidden.rows.group_by("sentence_id").agg(pl.col("token_id").first())
    assert (first["token_id"] == bos).all()
    next_token = table.filter((pl.col("offset") == 1) & (pl.col("layer") == 0))
    assert (next_token["n_rows"] == len(tokens) - tokens["sentence_id"].n_unique()).all()
    for row in table.filter(pl.col("offset") == 1).iter_rows(named=True):
        expected, _ = reference_pr(
            hidden, row["layer"], row["offset"], row["norm"], row["control"] == "shuffled_vocab"
        )
        assert row["pr"] == pytest.approx(expected, abs=1e-9), row
    excluded = measured(llama_folder, texts[:20], tmp_path / "x", 8, keep=False)[2].table()
    assert excluded["n_rows"].max() < table["n_rows"].max()


def test_batch_size_changes_nothing(llama_folder, texts, tmp_path):
    tables = [
        measured(llama_folder, texts[:30], tmp_path / str(size), size, keep=False)[2].table()
        for size in (1, 5, 30)
    ]
    for table in tables[1:]:
        assert table.drop("pr").equals(tables[0].drop("pr"))
        assert (table["pr"] - tables[0]["pr"]).abs().max() < 1e-10


def test_memory_held_does_not_grow_with_the_tokens(llama_folder, texts, tmp_path):
    """The statistics hold a fixed set of co-moments: their bytes are the same for 20 and
    for 40 texts."""

    def held_bytes(count):
        statistics = measured(llama_folder, texts[:count], tmp_path / str(count), 8, False)[2]
        moments = [*statistics.total.values(), *statistics.lacking.values()]
        return sum(m.comoment.nbytes + m.mean.nbytes for m in moments), moments[0].n

    (small, small_rows), (large, large_rows) = held_bytes(20), held_bytes(40)
    assert large_rows > 1.5 * small_rows
    assert large == small


def test_last_layer_is_the_same_under_every_norm(pass_):
    facts, _, statistics, _ = pass_
    table = statistics.table()
    last = table.filter((pl.col("layer") == facts.num_layers) & (pl.col("offset") == 1))
    assert last.filter(pl.col("control") == "none")["pr"].n_unique() == 1
    first = table.filter((pl.col("layer") == 1) & (pl.col("offset") == 1))
    assert first.filter(pl.col("control") == "none")["pr"].n_unique() == len(NORMS)


def test_targets_never_cross_sequences_or_use_special_tokens():
    rows = pl.DataFrame(
        {
            "sentence_id": [0, 0, 0, 1, 1],
            "position": [1, 2, 3, 1, 2],
            "token_id": [10, 11, 12, 20, 21],
        }
    )
    ids, defined = target_ids(rows, [-1, 1])
    assert defined[:, 0].tolist() == [False, True, True, False, True]
    assert defined[:, 1].tolist() == [True, True, False, True, False]
    assert ids[:, 1].tolist() == [11, 12, 0, 21, 0]
    permutation = np.arange(30)[::-1]
    values, _ = target_matrix(rows, [1], ["none", "shuffled_vocab"], [permutation])
    assert values[:, 0].tolist() == [11, 12, 0, 21, 0]
    assert values[:, 1].tolist() == [18, 17, 0, 8, 0]


def hand_targets(rows: pl.DataFrame, offset: int) -> tuple[np.ndarray, np.ndarray]:
    """(row index, target id) of every row whose token ``offset`` on in its sequence is
    observed, by a Python loop over the rows."""
    where = {(s, p): t for s, p, t in rows.select("sentence_id", "position", "token_id").rows()}
    pairs = [
        (row, where[s, p + offset])
        for row, (s, p) in enumerate(rows.select("sentence_id", "position").rows())
        if (s, p + offset) in where
    ]
    return np.array([row for row, _ in pairs]), np.array([target for _, target in pairs])


def seeded_mapping(targets: np.ndarray, seed: int = 0) -> dict[int, int]:
    """He & Su's shuffled vocabulary: the distinct labels (sorted) to a permutation of them,
    seeded ``seed``."""
    labels = np.unique(targets)
    return dict(zip(labels, np.random.default_rng(seed).permutation(labels), strict=True))


@pytest.mark.parametrize("shuffle_seed", [0, 7])
def test_present_shuffle_permutes_each_offsets_targets_among_themselves(pass_, shuffle_seed):
    """He & Su's released code: the shuffled targets of an offset are its targets under a
    seeded bijection of the ids that occur as its targets (a dictionary from the sorted
    distinct ids to a permutation of them seeded ``equilearning.shuffle_seed``), so they
    keep their set of values."""
    facts, tokens, _, _ = pass_
    rows = text_rows(tokens)
    present = present_ids(tokens, OFFSETS)
    maps = shuffled_maps(facts.vocab_size, len(OFFSETS), shuffle_seed, present)
    values, defined = target_matrix(rows, OFFSETS, CONTROLS, maps)
    for index, offset in enumerate(OFFSETS):
        at, targets = hand_targets(rows, offset)
        assert np.array_equal(np.flatnonzero(defined[:, index]), at)
        mapping = seeded_mapping(targets, shuffle_seed)
        shuffled = values[at, 2 * index + 1]
        assert np.array_equal(shuffled, [mapping[target] for target in targets])
        assert np.array_equal(np.unique(shuffled), np.unique(targets))
        assert (shuffled != targets).mean() > 0.5
        assert np.array_equal(values[at, 2 * index], targets)
    # The whole vocabulary's permutation (shuffle: vocabulary) under the same seed.
    vocabulary = np.random.default_rng(shuffle_seed).permutation(facts.vocab_size)
    for found in shuffled_maps(facts.vocab_size, len(OFFSETS), shuffle_seed, None):
        np.testing.assert_array_equal(found, vocabulary)


def test_present_shuffle_pr_matches_lstsq_on_the_shuffled_targets(llama_folder, texts, tmp_path):
    """The shuffled control's PR under ``present`` against lstsq on the kept states, the
    targets of each offset renamed by the bijection of its present ids."""
    _, _, statistics, hidden = measured(llama_folder, texts[:20], tmp_path, 8, shuffle="present")
    table = statistics.table().filter(pl.col("control") == "shuffled_vocab")
    for offset in OFFSETS:
        mapping = seeded_mapping(hand_targets(hidden.rows, offset)[1])
        renamed = SimpleNamespace(
            metadata=hidden.metadata,
            num_layers=hidden.num_layers,
            layer=hidden.layer,
            rows=hidden.rows.with_columns(
                pl.col("token_id").replace_strict(mapping, default=pl.col("token_id"))
            ),
        )
        for row in table.filter(pl.col("offset") == offset).iter_rows(named=True):
            expected, n_rows = reference_pr(renamed, row["layer"], offset, row["norm"], False)
            assert row["n_rows"] == n_rows
            assert row["pr"] == pytest.approx(expected, abs=1e-9), row
    vocabulary = measured(llama_folder, texts[:20], tmp_path / "v", 8, keep=False)[2].table()
    shuffled = vocabulary.filter(pl.col("control") == "shuffled_vocab")
    assert not np.allclose(shuffled["pr"].to_numpy(), table["pr"].to_numpy())


def test_too_few_rows_is_a_clear_error_before_the_model_runs(pass_):
    facts, tokens, _, _ = pass_
    few = tokens.filter(pl.col("sentence_id") == 0)
    with pytest.raises(LayerlawsError, match="Sample more or longer texts"):
        check_enough_rows(few, [1], facts.hidden_size)


def test_a_post_ln_model_gets_no_extra_norm(texts, tmp_path):
    """GPT-1 normalises each block's output: under ``model`` its layers are used as they
    are, so every PR equals the one without normalisation."""
    from conftest import llama_tokenizer
    from tiny_models import save_tiny_model

    folder = save_tiny_model(tmp_path / "gpt1", "openai-gpt", llama_tokenizer(texts))
    facts, _, statistics, _ = measured(folder, texts[:60], tmp_path, batch_size=16, keep=False)
    assert facts.post_ln
    table = statistics.table()
    keys = ["layer", "offset", "control"]
    model = table.filter(pl.col("norm") == "model").sort(keys)["pr"].to_numpy()
    none = table.filter(pl.col("norm") == "none").sort(keys)["pr"].to_numpy()
    standardized = table.filter(pl.col("norm") == "standardize").sort(keys)["pr"].to_numpy()
    assert np.array_equal(model, none)
    assert not np.allclose(model, standardized)
