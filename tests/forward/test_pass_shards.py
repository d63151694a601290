"""A model pass in shards (``equilearning.shards``): every observer of the pass merged from
shards equals the one-job pass — PR, fuzziness and evaluation within float64 rounding,
the token views' states bit for bit — and shards that overlap or miss rows are errors."""

import numpy as np
import polars as pl
import pytest
import torch
from config_blocks import validated_block

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.shards import shard_indices
from layerlaws.equilearning.pass_observers import PassObservers
from layerlaws.equilearning.settings import EquilearningSettings
from layerlaws.forward.model_pass import run_forward_pass
from layerlaws.forward.shards import merge_pass_shards, write_pass_shard
from layerlaws.models.loading import load_model, load_tokenizer
from layerlaws.models.precision import keep_float64
from layerlaws.models.preparation import prepare_model
from layerlaws.text.tokens import tokenize_sentences

SETTINGS = EquilearningSettings.from_config(
    validated_block("equilearning")
    | {"token_views": validated_block("equilearning")["token_views"] | {"layers": [0, 2, 4]}}
)


@pytest.fixture(scope="module")
def run(llama_folder, texts, tmp_path_factory):
    """The tiny Llama in float64 throughout (``keep_float64``: its RMSNorm's float32 cast
    kept in float64, so no state rounds to float32 and a sequence's states do not depend on
    its batch to float64 rounding) and the tokens of 40 texts."""
    folder = tmp_path_factory.mktemp("shards") / "m"
    facts = prepare_model({"source": {"kind": "local", "path": str(llama_folder)}}, folder)
    tokenizer = load_tokenizer(folder)
    sentences = pl.DataFrame(
        {"sentence_id": list(range(40)), "text": texts[:40], "source": ["t"] * 40}
    )
    tokens = tokenize_sentences(sentences, tokenizer, max_tokens=24)
    model = keep_float64(load_model(folder, "float32", "cpu").to(torch.float64))
    return model, facts, tokenizer, tokens


def observed(run, indices=None):
    """The pass's observers after a pass over the sequences of ``indices`` (all: None)."""
    model, facts, tokenizer, tokens = run
    observers = PassObservers.build(tokens, facts, tokenizer, SETTINGS, "next_token")
    report = run_forward_pass(
        model,
        facts,
        tokens,
        observers.observers,
        4,
        "cpu",
        progress=False,
        logit_observers=observers.logit_observers,
        sequence_indices=indices,
    )
    return observers, report


def sharded(run, shards, folder, order=None):
    """The pass in ``shards`` shards, written and merged (in ``order``)."""
    _, facts, tokenizer, tokens = run
    count = tokens["sentence_id"].n_unique()
    paths = []
    for shard in range(shards):
        observers, report = observed(run, shard_indices(count, shard, shards))
        paths.append(folder / f"{shard}.pt")
        write_pass_shard(paths[-1], observers.all, report)

    def built():
        return PassObservers.build(tokens, facts, tokenizer, SETTINGS, "next_token")

    merged = built()
    paths = paths if order is None else [paths[i] for i in order]
    report = merge_pass_shards(paths, merged.all, lambda: built().all)
    return merged, report


def assert_same_tables(found: PassObservers, expected: PassObservers):
    for name, table in expected.tables(SETTINGS).items():
        other = found.tables(SETTINGS)[name]
        assert table.height > 0 and other.columns == table.columns, name
        for column in table.columns:
            if table[column].dtype.is_float():
                reference = table[column].to_numpy()
                assert np.isfinite(reference).all(), (name, column)
                np.testing.assert_allclose(
                    other[column].to_numpy(), reference, rtol=1e-12, atol=0, err_msg=name
                )
            else:
                assert other[column].equals(table[column]), (name, column)
    states, reference = found.token_states(), expected.token_states()
    assert reference.keys() == states.keys() and all(len(v) for v in reference.values())
    for key in reference:
        assert np.array_equal(states[key], reference[key]), key


@pytest.mark.parametrize(("shards", "order"), [(2, None), (3, [2, 0, 1])])
def test_shards_merge_to_the_one_job_tables(run, tmp_path, shards, order):
    one_job, report = observed(run)
    merged, merged_report = sharded(run, shards, tmp_path, order)
    assert_same_tables(merged, one_job)
    for key in ("n_rows", "n_sequences", "n_tokens"):
        assert merged_report[key] == report[key], key
    assert merged_report["shards"] == shards


def test_a_missing_shard_or_one_merged_twice_is_an_error(run, tmp_path):
    _, facts, tokenizer, tokens = run
    count = tokens["sentence_id"].n_unique()
    observers, report = observed(run, shard_indices(count, 0, 2))
    write_pass_shard(tmp_path / "0.pt", observers.all, report)

    def built():
        return PassObservers.build(tokens, facts, tokenizer, SETTINGS, "next_token")

    merged = built()
    merge_pass_shards([tmp_path / "0.pt"], merged.all, lambda: built().all)
    with pytest.raises(LayerlawsError, match="fewer rows of the fuzziness classes"):
        merged.fuzziness.table()
    with pytest.raises(LayerlawsError, match="token views: layer 0 saw"):
        merged.token_states()
    with pytest.raises(LayerlawsError, match="fuzziness class"):
        merge_pass_shards([tmp_path / "0.pt"] * 2, built().all, lambda: built().all)
    (tmp_path / "1.pt").write_bytes(b"not a shard")
    with pytest.raises(LayerlawsError, match=r"cannot read the pass shard .*1\.pt"):
        merge_pass_shards([tmp_path / "1.pt"], built().all, lambda: built().all)
