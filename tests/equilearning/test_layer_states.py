"""``equilearning.layer_states``: He & Su's numbering of Mamba's and RWKV's layers
(transformers' ``output_hidden_states``, which holds no embeddings but the last block's
output before and after the final norm) reaches the pass: the PR of every layer against
float64 ``numpy.linalg.lstsq`` on transformers' own ``hidden_states`` of each text run
alone, rows and targets built by hand."""

import numpy as np
import polars as pl
import pytest
import torch
from conftest import corpus_texts
from lstsq_reference import lstsq_pr, normalized
from tiny_models import NUM_BLOCKS, tiny_family_model

from layerlaws import api
from layerlaws.equilearning.settings import EquilearningSettings
from layerlaws.text.tokens import tokenize_sentences

NORMS = {
    "mamba": ("rmsnorm", lambda model: model.backbone.norm_f.variance_epsilon),
    "rwkv": ("layernorm", lambda model: model.rwkv.ln_out.eps),
}
"""Each family's norm type and where its final norm keeps its epsilon."""
MAX_TOKENS = 32


def reference_pr(model, family: str, tokens: pl.DataFrame) -> dict[tuple[int, str], float]:
    """PR of next-token targets per (layer, norm) on transformers' ``hidden_states``: the
    rows are the text tokens followed by a text token of the same text."""
    norm_type, eps = NORMS[family][0], NORMS[family][1](model)
    features, targets = [[] for _ in range(NUM_BLOCKS + 1)], []
    for part in tokens.sort("sentence_id", "position").partition_by(
        "sentence_id", maintain_order=True
    ):
        ids, special = part["token_id"].to_list(), part["is_special"].to_list()
        with torch.no_grad():
            hidden = model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
        rows = [p for p in range(len(ids) - 1) if not special[p] and not special[p + 1]]
        for layer, state in enumerate(hidden):
            features[layer].append(state[0].numpy()[rows])
        targets += [ids[p + 1] for p in rows]
    pr = {}
    for layer, parts in enumerate(features):
        for norm in ("model", "none"):
            x = np.concatenate(parts)
            if layer < NUM_BLOCKS and norm == "model":
                x = normalized(x, "model", norm_type, eps)
            pr[(layer, norm)] = lstsq_pr(x, np.array(targets))
    return pr


@pytest.mark.parametrize("family", ["mamba", "rwkv"])
def test_the_papers_numbering_regresses_transformers_hidden_states(family, tokenizer, tmp_path):
    """Under layer_states: hidden_states the PR of layers 0..L is lstsq's on transformers'
    hidden_states 0..L (under the default, block_inputs, layer 0 would be the embeddings:
    ``tests/models/test_layer_indexing.py``)."""
    model = tiny_family_model(family, tokenizer, tmp_path)
    texts = corpus_texts()[:16]
    settings = EquilearningSettings(
        offsets=(1,), norms=("model", "none"), controls=("none",), layer_states="hidden_states"
    )
    probing = api.Texts(texts, max_tokens=MAX_TOKENS, min_tokens=1)
    law = api.equilearning_law(model, tokenizer, probing, settings, batch_size=7, progress=False)
    sentences = pl.DataFrame(
        {"sentence_id": range(len(texts)), "text": texts, "source": "test"},
        schema={"sentence_id": pl.Int64, "text": pl.String, "source": pl.String},
    )
    tokens = tokenize_sentences(sentences, tokenizer, MAX_TOKENS, min_tokens=1)
    reference = reference_pr(model, family, tokens)
    ours = law.pr.sort("layer", "norm")
    assert ours["layer"].unique().to_list() == list(range(NUM_BLOCKS + 1))
    assert ours["n_rows"].min() > 2 * model.config.hidden_size
    expected = [reference[(row["layer"], row["norm"])] for row in ours.iter_rows(named=True)]
    np.testing.assert_allclose(ours["pr"].to_numpy(), expected, rtol=0, atol=1e-9)
    # Layers L − 1 and L are the last block's output before and after the final norm: one
    # PR under the model norm (the unit norm and the final norm differ by a diagonal map).
    # Mamba's final norm rounds its output to float32 (u = 2⁻²⁴ a feature), which moves PR by
    # up to ≈ 2u·√(PR(1 − PR)) ≈ 3e-8 per unit of condition (5e-10 seen); RWKV's is float64.
    model_norm = ours.filter(pl.col("norm") == "model")["pr"].to_numpy()
    assert model_norm[-2] == pytest.approx(model_norm[-1], abs=1e-7 if family == "mamba" else 1e-9)
