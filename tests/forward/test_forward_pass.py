"""The forward pass and kept hidden states: batching, padding and out-of-memory retries
never change a token's states; storage dtypes, shards and their reader."""

import json

import numpy as np
import polars as pl
import pytest
import torch

from layerlaws.core.errors import LayerlawsError
from layerlaws.forward.kept_states import HiddenStates
from layerlaws.forward.kept_writer import extract_hidden_states
from layerlaws.forward.model_pass import (
    CPU_BATCH_SIZE,
    automatic_batch_size,
    length_sorted_batches,
    run_forward_pass,
    text_rows,
)
from layerlaws.models.architectures import blocks_of
from layerlaws.models.loading import load_model, load_tokenizer
from layerlaws.models.preparation import prepare_model
from layerlaws.text.tokens import tokenize_sentences


def tokenised(folder, texts, tmp_path):
    facts = prepare_model({"source": {"kind": "local", "path": str(folder)}}, tmp_path / "m")
    sentences = pl.DataFrame(
        {"sentence_id": list(range(len(texts))), "text": texts, "source": ["t"] * len(texts)}
    )
    return facts, tokenize_sentences(sentences, load_tokenizer(tmp_path / "m"), max_tokens=24)


def extracted(folder, texts, tmp_path, batch_size, **options):
    facts, tokens = tokenised(folder, texts, tmp_path)
    model = load_model(tmp_path / "m", "float32", "cpu")
    extract_hidden_states(
        model,
        facts,
        tokens,
        out_folder=tmp_path / "hidden",
        batch_size=batch_size,
        device="cpu",
        progress=False,
        **options,
    )
    return model, tokens, HiddenStates.open(tmp_path / "hidden")


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_batched_states_equal_unbatched_forward(family, llama_folder, gpt2_folder, texts, tmp_path):
    folder = llama_folder if family == "llama" else gpt2_folder
    model, tokens, hidden = extracted(folder, texts[:9], tmp_path, batch_size=4)
    assert hidden.rows.select("sentence_id", "position", "token_id").equals(text_rows(tokens))
    assert hidden.rows["row"].to_list() == list(range(len(hidden.rows)))
    assert hidden.metadata["n_rows"] == len(hidden.rows)
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


def test_shards_storage_dtypes_and_a_corrupt_folder(llama_folder, texts, tmp_path):
    reference = extracted(llama_folder, texts[:6], tmp_path / "a", 3, shard_rows=17)[2]
    n_rows = len(reference.rows)
    files = sorted((reference.folder / "layer_002").glob("shard_*.npy"))
    assert [len(np.load(path)) for path in files] == [17] * (n_rows // 17) + [n_rows % 17]
    for storage, tolerance in (("float16", 1e-3), ("bfloat16", 8e-3)):
        _, _, stored = extracted(
            llama_folder, texts[:6], tmp_path / storage, 2, storage_dtype=storage, shard_rows=17
        )
        assert stored.metadata["storage_dtype"] == storage
        for layer in range(stored.num_layers + 1):
            expected = reference.layer(layer)
            got = stored.layer(layer)
            assert got.dtype == np.float32
            torch.testing.assert_close(
                torch.from_numpy(got),
                torch.from_numpy(expected).to(getattr(torch, storage)).float(),
                rtol=0,
                atol=0,
            )
            assert np.abs(got - expected).max() <= tolerance * np.abs(expected).max()
    (reference.folder / "layer_002" / "shard_00001.npy").write_bytes(b"not an array")
    with pytest.raises(LayerlawsError, match=r"corrupt.*rerun"):
        reference.layer(2)
    (reference.folder / "metadata.json").write_text("{broken")
    with pytest.raises(LayerlawsError, match="delete it and rerun"):
        HiddenStates.open(reference.folder)
    assert json.loads((tmp_path / "a" / "m" / "layerlaws_model.json").read_text())["num_layers"]


class OutOfMemoryAtBlock:
    """Makes ``block`` fail like a full GPU whenever its batch holds more than ``fits``
    sequences, after the layers before it were observed; records the batch sizes seen."""

    def __init__(self, model, block: int, fits: int) -> None:
        self.calls: list[int] = []

        def check(_module, args, kwargs):
            size = len(args[0] if args else kwargs["hidden_states"])
            self.calls.append(size)
            if size > fits:
                raise torch.OutOfMemoryError("CUDA out of memory (injected)")

        self.hook = blocks_of(model)[block].register_forward_pre_hook(check, with_kwargs=True)


class Recorder:
    """An observer that keeps what it is shown: {layer: {row number: state}}."""

    def __init__(self) -> None:
        self.seen: dict[int, dict[int, np.ndarray]] = {}
        self.counts: dict[int, int] = {}

    def begin_batch(self, batch) -> None:
        self.rows = batch.row_numbers

    def observe(self, layer, states) -> None:
        for row, state in zip(self.rows, states.numpy(), strict=True):
            self.seen.setdefault(layer, {})[int(row)] = state
            self.counts[layer] = self.counts.get(layer, 0) + 1


def test_out_of_memory_splits_the_batch_and_resumes_at_the_failed_layer(
    llama_folder, texts, tmp_path
):
    facts, tokens = tokenised(llama_folder, texts[:7], tmp_path)
    model = load_model(tmp_path / "m", "float32", "cpu")
    reference = Recorder()
    run_forward_pass(model, facts, tokens, [reference], 7, "cpu", progress=False)
    injected = OutOfMemoryAtBlock(model, block=2, fits=2)
    retried = Recorder()
    report = run_forward_pass(model, facts, tokens, [retried], 7, "cpu", progress=False)
    injected.hook.remove()
    assert injected.calls == [7, 3, 1, 2, 4, 2, 2]
    assert report["out_of_memory_retries"] == 3
    # Layers 0 and 1 were observed once, before the failure; nothing was observed twice.
    assert retried.counts == reference.counts
    for layer, states in reference.seen.items():
        for row, state in states.items():
            np.testing.assert_allclose(retried.seen[layer][row], state, atol=1e-5)


class FullAtLayer(Recorder):
    """A Recorder that runs out of memory at ``layer``, before keeping anything, whenever its
    batch holds more than ``fits`` sequences."""

    def __init__(self, layer: int, fits: int) -> None:
        super().__init__()
        self.layer, self.fits = layer, fits

    def begin_batch(self, batch) -> None:
        super().begin_batch(batch)
        self.sequences = len(batch.input_ids)

    def observe(self, layer, states) -> None:
        if layer == self.layer and self.sequences > self.fits:
            raise torch.OutOfMemoryError("CUDA out of memory (injected)")
        super().observe(layer, states)


def test_an_observer_out_of_memory_leaves_the_layer_to_it_alone(llama_folder, texts, tmp_path):
    """The second observer runs out of memory at layer 2 after the first observed it: the
    halves resume the first at layer 3 and the second at 2, so each sees every row once."""
    facts, tokens = tokenised(llama_folder, texts[:7], tmp_path)
    model = load_model(tmp_path / "m", "float32", "cpu")
    reference = Recorder()
    run_forward_pass(model, facts, tokens, [reference], 7, "cpu", progress=False)
    first, second = Recorder(), FullAtLayer(layer=2, fits=2)
    report = run_forward_pass(model, facts, tokens, [first, second], 7, "cpu", progress=False)
    assert report["out_of_memory_retries"] == 3
    for observer in (first, second):
        assert observer.counts == reference.counts
        for layer, states in reference.seen.items():
            assert observer.seen[layer].keys() == states.keys()
            for row, state in states.items():
                np.testing.assert_allclose(observer.seen[layer][row], state, atol=1e-5)


class LogitCounter:
    """A logit observer that counts the rows of logits it is shown."""

    rows = 0

    def begin_batch(self, batch) -> None:
        pass

    def observe_logits(self, logits) -> None:
        self.rows += len(logits)


def test_the_output_layer_runs_only_when_the_logits_are_observed(llama_folder, texts, tmp_path):
    facts, tokens = tokenised(llama_folder, texts[:7], tmp_path)
    model = load_model(tmp_path / "m", "float32", "cpu")
    head_calls = []
    hook = model.get_output_embeddings().register_forward_hook(
        lambda _module, _args, output: head_calls.append(output.shape[:2])
    )
    alone, beside = Recorder(), Recorder()
    run_forward_pass(model, facts, tokens, [alone], 3, "cpu", progress=False)
    assert head_calls == []
    counter = LogitCounter()
    run_forward_pass(
        model, facts, tokens, [beside], 3, "cpu", progress=False, logit_observers=[counter]
    )
    hook.remove()
    rows = len(text_rows(tokens))
    assert len(head_calls) == 3 and counter.rows == rows
    assert alone.counts == beside.counts == {layer: rows for layer in range(facts.num_layers + 1)}
    for layer, states in beside.seen.items():
        for row, state in states.items():
            np.testing.assert_array_equal(alone.seen[layer][row], state)


def test_a_sequence_too_long_for_the_device_is_a_clear_error(llama_folder, texts, tmp_path):
    facts, tokens = tokenised(llama_folder, texts[:1], tmp_path)
    model = load_model(tmp_path / "m", "float32", "cpu")
    OutOfMemoryAtBlock(model, block=0, fits=0)
    with pytest.raises(LayerlawsError, match="lower the dataset's max_tokens"):
        run_forward_pass(model, facts, tokens, [Recorder()], 1, "cpu", progress=False)


def test_automatic_batch_size_on_cpu(llama_folder, tmp_path):
    facts = prepare_model({"source": {"kind": "local", "path": str(llama_folder)}}, tmp_path / "m")
    assert automatic_batch_size(facts, 128, "cpu", 4) == CPU_BATCH_SIZE


def test_batches_are_sorted_by_length():
    assert length_sorted_batches([3, 9, 1, 9, 5], 2) == [[1, 3], [4, 0], [2]]


def test_bfloat16_pass_is_close_to_float32(llama_folder, texts, tmp_path):
    _, tokens, reference = extracted(llama_folder, texts[:4], tmp_path / "f32", batch_size=2)
    facts = prepare_model({"source": {"kind": "local", "path": str(llama_folder)}}, tmp_path / "b")
    half = load_model(tmp_path / "b", "bfloat16", "cpu")
    metadata = extract_hidden_states(
        half, facts, tokens, out_folder=tmp_path / "h16", batch_size=2, device="cpu", progress=False
    )
    assert metadata["compute_dtype"] == "bfloat16"
    states = HiddenStates.open(tmp_path / "h16")
    for layer in range(states.num_layers + 1):
        array = states.layer(layer)
        assert array.dtype == np.float32
        scale = np.abs(reference.layer(layer)).max()
        assert np.abs(array - reference.layer(layer)).max() <= 0.05 * scale
