"""Hidden-state extraction: batching and padding never change a token's states."""

import json

import numpy as np
import polars as pl
import pytest
import torch

from layerlaws.errors import LayerlawsError
from layerlaws.hidden import (
    CPU_BATCH_SIZE,
    HiddenStates,
    automatic_batch_size,
    extract_hidden_states,
    length_sorted_batches,
)
from layerlaws.models import load_model, load_tokenizer, prepare_model
from layerlaws.tokens import tokenize_sentences


def extracted(folder, texts, tmp_path, batch_size):
    facts = prepare_model({"source": {"kind": "local", "path": str(folder)}}, tmp_path / "m")
    sentences = pl.DataFrame(
        {"sentence_id": list(range(len(texts))), "text": texts, "source": ["t"] * len(texts)}
    )
    tokens = tokenize_sentences(sentences, load_tokenizer(tmp_path / "m"), max_tokens=24)
    model = load_model(tmp_path / "m", "float32", "cpu")
    extract_hidden_states(
        model, facts, tokens, tmp_path / "hidden", batch_size, "cpu", progress=False
    )
    return model, tokens, HiddenStates.open(tmp_path / "hidden")


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_batched_states_equal_unbatched_forward(family, llama_folder, gpt2_folder, texts, tmp_path):
    folder = llama_folder if family == "llama" else gpt2_folder
    model, tokens, hidden = extracted(folder, texts[:9], tmp_path, batch_size=4)
    text_tokens = tokens.filter(~pl.col("is_special"))
    assert hidden.rows.select("sentence_id", "position", "token_id").equals(
        text_tokens.select("sentence_id", "position", "token_id")
    )
    assert hidden.metadata["n_rows"] == len(text_tokens)
    for sentence_id, part in tokens.group_by("sentence_id", maintain_order=True):
        ids = torch.tensor(part["token_id"].to_list())[None]
        with torch.no_grad():
            states = model(ids, output_hidden_states=True).hidden_states
        rows = np.flatnonzero(hidden.rows["sentence_id"].to_numpy() == sentence_id[0])
        keep = ~part["is_special"].to_numpy()
        for layer in range(hidden.num_layers + 1):
            np.testing.assert_allclose(
                hidden.layer(layer)[rows], states[layer][0][keep].numpy(), rtol=1e-4, atol=1e-5
            )


def test_layer_count_and_corrupt_cache(llama_folder, texts, tmp_path):
    _, _, hidden = extracted(llama_folder, texts[:3], tmp_path, batch_size=2)
    assert hidden.num_layers == 4
    assert sorted(p.name for p in hidden.folder.glob("layer_*.npy"))[-1] == "layer_004.npy"
    (hidden.folder / "layer_002.npy").write_bytes(b"not an array")
    with pytest.raises(LayerlawsError, match=r"corrupt.*rerun"):
        hidden.layer(2)
    (hidden.folder / "metadata.json").write_text("{broken")
    with pytest.raises(LayerlawsError, match="delete the folder"):
        HiddenStates.open(hidden.folder)
    assert json.loads((tmp_path / "m" / "layerlaws_model.json").read_text())["num_layers"] == 4


class RunsOutOfMemory:
    """A model that fails like a full GPU whenever a batch holds more than ``fits``
    sequences (and otherwise is the model it wraps)."""

    def __init__(self, model, fits=2):
        self.wrapped, self.fits, self.calls = model, fits, []

    def __call__(self, input_ids, **kwargs):
        self.calls.append(len(input_ids))
        if len(input_ids) > self.fits:
            raise torch.OutOfMemoryError("CUDA out of memory (injected)")
        return self.wrapped(input_ids=input_ids, **kwargs)

    def __getattr__(self, name):
        return getattr(self.wrapped, name)


def test_out_of_memory_splits_the_batch_and_gives_the_same_states(llama_folder, texts, tmp_path):
    model, tokens, reference = extracted(llama_folder, texts[:7], tmp_path, batch_size=7)
    failing = RunsOutOfMemory(model)
    facts = prepare_model(
        {"source": {"kind": "local", "path": str(llama_folder)}}, tmp_path / "again"
    )
    metadata = extract_hidden_states(
        failing, facts, tokens, tmp_path / "retried", 7, "cpu", progress=False
    )
    assert failing.calls == [7, 3, 1, 2, 4, 2, 2]
    assert metadata["out_of_memory_retries"] == 3
    retried = HiddenStates.open(tmp_path / "retried")
    for layer in range(reference.num_layers + 1):
        np.testing.assert_allclose(retried.layer(layer), reference.layer(layer), atol=1e-5)


def test_a_sequence_too_long_for_the_device_is_a_clear_error(llama_folder, texts, tmp_path):
    model, tokens, _ = extracted(llama_folder, texts[:1], tmp_path, batch_size=1)
    always_full = RunsOutOfMemory(model, fits=0)
    facts = prepare_model({"source": {"kind": "local", "path": str(llama_folder)}}, tmp_path / "m2")
    with pytest.raises(LayerlawsError, match="lower the dataset's max_tokens"):
        extract_hidden_states(always_full, facts, tokens, tmp_path / "x", 1, "cpu", progress=False)


def test_automatic_batch_size_on_cpu(llama_folder, tmp_path):
    facts = prepare_model({"source": {"kind": "local", "path": str(llama_folder)}}, tmp_path / "m")
    assert automatic_batch_size(facts, 128, "cpu", 4) == CPU_BATCH_SIZE


def test_batches_are_sorted_by_length():
    assert length_sorted_batches([3, 9, 1, 9, 5], 2) == [[1, 3], [4, 0], [2]]


def test_bfloat16_extraction_is_stored_in_float32_close_to_float32(llama_folder, texts, tmp_path):
    _, tokens, reference = extracted(llama_folder, texts[:4], tmp_path, batch_size=2)
    facts = prepare_model(
        {"source": {"kind": "local", "path": str(llama_folder)}}, tmp_path / "bf16"
    )
    half = load_model(tmp_path / "bf16", "bfloat16", "cpu")
    metadata = extract_hidden_states(
        half, facts, tokens, tmp_path / "h16", 2, "cpu", progress=False
    )
    assert metadata["compute_dtype"] == "bfloat16" and metadata["storage_dtype"] == "float32"
    states = HiddenStates.open(tmp_path / "h16")
    for layer in range(states.num_layers + 1):
        array = states.layer(layer)
        assert array.dtype == np.float32
        scale = np.abs(reference.layer(layer)).max()
        assert np.abs(array - reference.layer(layer)).max() <= 0.05 * scale
