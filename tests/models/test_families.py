"""Every family of the architecture table measured right, or rejected before measuring.

For a tiny random model of each family: preparation (facts read from the model),
extraction in padded batches, block tracing and one Jacobian. The references are
independent of the table and of ``hidden_states``: the block list is found by scanning the
model for its one module list of ``num_hidden_layers`` blocks, the LM head is transformers'
``get_output_embeddings()``, and forward hooks on them record, for each sequence alone,
what the first block receives (layer 0) and what the LM head receives (layer L).
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch
from tiny_models import (
    ENCODER_DECODER_OPTIONS,
    ENCODER_OPTIONS,
    FAMILIES,
    WIDTH,
    save_tiny_model,
)
from whole_model_jacobians import scanned_blocks

from layerlaws.core.errors import LayerlawsError
from layerlaws.coupling.jacobians import jacobian_rows
from layerlaws.forward.kept_states import HiddenStates
from layerlaws.forward.kept_writer import extract_hidden_states
from layerlaws.models.architectures import ARCHITECTURES
from layerlaws.models.blocks import trace_blocks
from layerlaws.models.loading import load_model
from layerlaws.models.preparation import prepare_model
from layerlaws.text.tokens import tokenize_sentences

RMSNORM_FAMILIES = {
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "phi3",
    "gemma",
    "gemma2",
    "gemma3_text",
    "olmo2",
    "granite",
    "smollm3",
    "jamba",
    "recurrent_gemma",
    "mamba",
    "mamba2",
    "falcon_mamba",
}
"""Families whose norm is an RMSNorm (the others use LayerNorm), from their papers."""
POST_LN_FAMILIES = {"openai-gpt"}


@pytest.fixture(scope="module")
def tokens(tokenizer, texts):
    """Four texts of different lengths (at most 12 tokens with BOS), so batches are padded."""
    cut = [text[:length] for text, length in zip(texts, (25, 40, 55, 70), strict=False)]
    sentences = pl.DataFrame({"sentence_id": [0, 1, 2, 3], "text": cut, "source": "t"})
    table = tokenize_sentences(sentences, tokenizer, max_tokens=12)
    assert table.group_by("sentence_id").len()["len"].n_unique() > 1
    return table


def reference_ends(model: torch.nn.Module, ids: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Layer 0 and layer L of one unpadded sequence (1, T): (T, d) each."""
    seen: dict[str, torch.Tensor] = {}

    def first_block(_module, args, kwargs):
        seen["first"] = (args[0] if args else kwargs["hidden_states"])[0].clone()

    def head(_module, args):
        seen["head"] = args[0][0].clone()

    hooks = [
        scanned_blocks(model)[0].register_forward_pre_hook(first_block, with_kwargs=True),
        model.get_output_embeddings().register_forward_pre_hook(head),
    ]
    with torch.no_grad():
        model(input_ids=ids)
    for hook in hooks:
        hook.remove()
    return seen["first"].numpy(), seen["head"].numpy()


@pytest.mark.parametrize("family", FAMILIES)
def test_family_is_measured_right(family, tokenizer, tokens, tmp_path):
    source = save_tiny_model(tmp_path / "source", family, tokenizer)
    facts = prepare_model({"source": {"kind": "local", "path": str(source)}}, tmp_path / "m")
    assert (facts.num_layers, facts.hidden_size) == (2, WIDTH)
    assert facts.norm_type == ("rmsnorm" if family in RMSNORM_FAMILIES else "layernorm")
    assert facts.post_ln == (family in POST_LN_FAMILIES)
    assert 0 < facts.norm_eps < 1e-3

    model = load_model(tmp_path / "m", "float32", "cpu")
    extract_hidden_states(
        model,
        facts,
        tokens,
        out_folder=tmp_path / "hidden",
        batch_size=3,
        device="cpu",
        progress=False,
    )
    hidden = HiddenStates.open(tmp_path / "hidden")
    assert hidden.num_layers == 2
    first_diffs, last_diffs = [], []
    for sentence_id, part in tokens.group_by("sentence_id", maintain_order=True):
        first, last = reference_ends(model, torch.tensor([part["token_id"].to_list()]))
        rows = np.flatnonzero(hidden.rows["sentence_id"].to_numpy() == sentence_id[0])
        text = ~part["is_special"].to_numpy()
        assert len(rows) == text.sum() > 0
        np.testing.assert_allclose(hidden.layer(0)[rows], first[text], rtol=0, atol=1e-5)
        np.testing.assert_allclose(hidden.layer(2)[rows], last[text], rtol=0, atol=1e-5)
        first_diffs.append(np.abs(hidden.layer(0)[rows] - first[text]).max())
        last_diffs.append(np.abs(hidden.layer(2)[rows] - last[text]).max())
    first_diff, last_diff = np.max(first_diffs), np.max(last_diffs)

    eager = load_model(tmp_path / "m", "float32", "cpu", attention="eager")
    ids = torch.tensor([tokens.filter(pl.col("sentence_id") == 0)["token_id"].to_list()])
    calls, streams = trace_blocks(eager, ids)
    assert len(calls) == 2 and streams.shape == (3, ids.shape[1], WIDTH)
    np.testing.assert_allclose(streams[0].numpy(), reference_ends(eager, ids)[0], atol=1e-5)
    last_token = ids.shape[1] - 1
    jacobian = jacobian_rows(calls[1].branch, streams[1], last_token, [last_token], 8)[0]
    reference = torch.autograd.functional.jacobian(
        lambda x: calls[1].branch(x[None])[0], streams[1]
    )[last_token, :, last_token, :]
    jacobian_diff = (jacobian - reference).abs().max().item()
    assert jacobian_diff <= 1e-5
    print(
        f"\n| {family} | ok | ok | ok | ok ({jacobian_diff:.1e}) | {first_diff:.1e} | "
        f"{last_diff:.1e} |"
    )


def test_the_table_lists_exactly_the_tested_families():
    """Encoder–decoders are tested in tests/forward/test_encoder_decoder.py."""
    assert set(ARCHITECTURES) == set(FAMILIES) | set(ENCODER_OPTIONS) | set(ENCODER_DECODER_OPTIONS)


@pytest.mark.parametrize(
    ("family", "change", "message"),
    [
        ("opt", {"do_layer_norm_before": False}, "do_layer_norm_before=False is not supported"),
        (
            "bloom",
            {"apply_residual_connection_post_layernorm": True},
            "apply_residual_connection_post_layernorm=True is not supported",
        ),
        ("bert", {"is_decoder": True}, "'bert' with is_decoder=True is not supported"),
        ("electra", {}, "model type 'electra' is not in the architecture table"),
    ],
)
def test_unsupported_models_are_rejected_before_measuring(
    family, change, message, tokenizer, tmp_path
):
    from transformers import CONFIG_MAPPING

    if family in FAMILIES or family in ENCODER_OPTIONS:
        save_tiny_model(tmp_path / "source", family, tokenizer, **change)
    else:
        config = CONFIG_MAPPING[family](
            vocab_size=len(tokenizer),
            hidden_size=WIDTH,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            **change,
        )
        (tmp_path / "source").mkdir()
        config.save_pretrained(tmp_path / "source")
        tokenizer.save_pretrained(tmp_path / "source")
    with pytest.raises(LayerlawsError, match=message):
        prepare_model(
            {"source": {"kind": "local", "path": str(tmp_path / "source")}}, tmp_path / "m"
        )
    assert not (tmp_path / "m").exists()
