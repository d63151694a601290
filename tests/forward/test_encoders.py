"""Masked-LM encoders (BERT, RoBERTa): measured as post-LN models through their masked-LM
head, and probed with their own task — masks of He & Su's released code (every chosen
token the mask token) or of BERT's 80/10/10 rule, rows at the chosen positions only, the
PR of those rows against float64 lstsq."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
import scipy.stats
import torch
from conftest import llama_tokenizer
from lstsq_reference import reference_pr
from tiny_models import ENCODER_OPTIONS, WIDTH, save_tiny_model

from layerlaws.core.errors import LayerlawsError
from layerlaws.equilearning.evaluation import HeldOutEvaluation
from layerlaws.equilearning.statistics import EquilearningStatistics, normalized
from layerlaws.forward.kept_states import HiddenStates
from layerlaws.forward.kept_writer import HiddenStateWriter
from layerlaws.forward.masking import TARGET_OFFSETS, mask_tokens, probe_of, probe_tokens
from layerlaws.forward.model_pass import run_forward_pass, text_rows
from layerlaws.forward.settings import MaskingSettings
from layerlaws.models.facts import read_facts
from layerlaws.models.loading import load_model, load_tokenizer
from layerlaws.models.preparation import prepare_model
from layerlaws.text.tokens import tokenize_sentences

OFFSETS = [-1, 0, 1]


@pytest.fixture(scope="module")
def encoder_tokenizer(texts):
    """The word-level test tokenizer with a mask token."""
    tokenizer = llama_tokenizer(texts)
    tokenizer.add_special_tokens({"mask_token": "<mask>"})
    return tokenizer


@pytest.fixture(scope="module", params=sorted(ENCODER_OPTIONS))
def encoder(request, encoder_tokenizer, texts, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param)
    source = save_tiny_model(root / "source", request.param, encoder_tokenizer)
    facts = prepare_model({"source": {"kind": "local", "path": str(source)}}, root / "m")
    sentences = pl.DataFrame(
        {"sentence_id": list(range(30)), "text": texts[:30], "source": ["t"] * 30}
    )
    tokens = tokenize_sentences(sentences, load_tokenizer(root / "m"), max_tokens=16)
    return request.param, root, facts, tokens


def test_encoders_are_post_ln_and_their_layers_are_the_encoder_states(encoder):
    family, root, facts, tokens = encoder
    assert facts.post_ln and facts.norm_type == "layernorm"
    assert (facts.num_layers, facts.hidden_size) == (2, WIDTH)
    assert probe_of("auto", family) == "masked_lm"
    model = load_model(root / "m", "float32", "cpu")
    writer = HiddenStateWriter(root / "h", facts, text_rows(tokens), "float32", 1000)
    writer.finish(run_forward_pass(model, facts, tokens, [writer], 7, "cpu", progress=False))
    hidden = HiddenStates.open(root / "h")
    for sentence_id, part in tokens.group_by("sentence_id", maintain_order=True):
        ids = torch.tensor([part["token_id"].to_list()])
        with torch.no_grad():
            reference = model(input_ids=ids, output_hidden_states=True).hidden_states
        text = ~part["is_special"].to_numpy()
        rows = np.flatnonzero(hidden.rows["sentence_id"].to_numpy() == sentence_id[0])
        for layer in range(3):
            np.testing.assert_allclose(
                hidden.layer(layer)[rows], reference[layer][0].numpy()[text], atol=1e-5
            )
    # Post-LN: the paper's ``model`` normalisation adds no norm.
    states = torch.from_numpy(hidden.layer(1).astype(np.float64))
    assert torch.equal(normalized(states, "model", facts), states)


VOCAB = 50_000


@pytest.fixture(scope="module")
def large_table():
    """400 sequences of 100 tokens, the first of each special, ids drawn from [10, VOCAB)."""
    count = 40_000
    rng = np.random.default_rng(7)
    return pl.DataFrame(
        {
            "sentence_id": np.repeat(np.arange(400), 100),
            "position": np.tile(np.arange(100), 400).astype(np.int32),
            "token_id": rng.integers(10, VOCAB, count),
            "is_special": np.tile(np.arange(100) == 0, 400),
        }
    )


def test_mask_only_turns_every_chosen_token_into_the_mask_token(large_table):
    """He & Su's released code: the chosen text tokens (rate 0.15 within binomial bounds)
    are exactly the positions the model reads as the mask token, and each is a row."""
    masked = mask_tokens(large_table, VOCAB, 3, 0.15, seed=0, scheme="mask_only")
    inputs, original = masked["input_id"].to_numpy(), masked["token_id"].to_numpy()
    chosen, special = masked["is_target"].to_numpy(), masked["is_special"].to_numpy()
    assert np.array_equal(chosen, inputs == 3)
    assert (inputs[~chosen] == original[~chosen]).all()
    assert not (chosen & special).any()
    assert scipy.stats.binomtest(int(chosen.sum()), int((~special).sum()), 0.15).pvalue > 1e-4
    assert mask_tokens(large_table, VOCAB, 3, 0.15, seed=0, scheme="mask_only").equals(masked)
    other = mask_tokens(large_table, VOCAB, 3, 0.15, seed=1, scheme="mask_only")
    assert not other["is_target"].equals(masked["is_target"])
    # The same draws choose the same positions under both schemes.
    bert = mask_tokens(large_table, VOCAB, 3, 0.15, seed=0, scheme="bert")
    assert bert["is_target"].equals(masked["is_target"])


@pytest.mark.parametrize("scheme", ["mask_only", "bert"])
def test_the_masking_rate_is_the_share_of_text_tokens_chosen(large_table, scheme):
    """``equilearning.masking.rate`` other than BERT's 0.15: 0.4 of the text tokens are
    chosen, within binomial bounds (0.15 lies 80 standard deviations away)."""
    masked = mask_tokens(large_table, VOCAB, 3, 0.4, seed=0, scheme=scheme)
    chosen, text = int(masked["is_target"].sum()), int((~masked["is_special"]).sum())
    assert scipy.stats.binomtest(chosen, text, 0.4).pvalue > 1e-4


def test_bert_masks_follow_the_80_10_10_rule_within_binomial_bounds(large_table):
    masked = mask_tokens(large_table, VOCAB, mask_token_id=3, rate=0.15, seed=0, scheme="bert")
    chosen = masked["is_target"].to_numpy()
    assert not (chosen & masked["is_special"].to_numpy()).any()
    text = int((~masked["is_special"]).sum())
    inputs, original = masked["input_id"].to_numpy(), masked["token_id"].to_numpy()
    n_chosen = int(chosen.sum())
    as_mask = int((inputs[chosen] == 3).sum())
    kept = int((inputs[chosen] == original[chosen]).sum())
    replaced = n_chosen - as_mask - kept
    for observed, trials, p in (
        (n_chosen, text, 0.15),
        (as_mask, n_chosen, 0.8),
        (kept, n_chosen, 0.1 + 0.1 / VOCAB),
        (replaced, n_chosen, 0.1 - 0.1 / VOCAB),
    ):
        assert scipy.stats.binomtest(observed, trials, p).pvalue > 1e-4, (observed, trials, p)
    assert (inputs[~chosen] == original[~chosen]).all()
    again = mask_tokens(large_table, VOCAB, 3, 0.15, seed=0, scheme="bert")
    assert again.equals(masked)
    other = mask_tokens(large_table, VOCAB, 3, 0.15, seed=1, scheme="bert")
    assert not other["is_target"].equals(masked["is_target"])
    with pytest.raises(LayerlawsError, match="has none"):
        mask_tokens(large_table, VOCAB, None, 0.15, 0, "mask_only")


@pytest.mark.parametrize("scheme", ["mask_only", "bert"])
def test_masked_lm_probe_regresses_only_the_masked_positions(encoder, scheme):
    _, root, facts, tokens = encoder
    tokenizer = load_tokenizer(root / "m")
    masked = probe_tokens(
        tokens,
        probe="masked_lm",
        vocab_size=facts.vocab_size,
        mask_token_id=tokenizer.mask_token_id,
        masking=MaskingSettings(rate=0.3, seed=2, scheme=scheme),
        special_tokens="exclude",
        encoder_decoder="one_stack",
    )
    at_mask = masked["input_id"] == tokenizer.mask_token_id
    assert at_mask.equals(masked["is_target"]) == (scheme == "mask_only")
    statistics = EquilearningStatistics(facts, OFFSETS, ["model"], ["none"], shuffle_seed=0)
    evaluation = HeldOutEvaluation(TARGET_OFFSETS["masked_lm"])
    writer = HiddenStateWriter(root / f"masked-{scheme}", facts, text_rows(masked), "float32", 1000)
    model = load_model(root / "m", "float32", "cpu")
    report = run_forward_pass(
        model,
        facts,
        masked,
        [statistics, writer],
        5,
        "cpu",
        progress=False,
        logit_observers=[evaluation],
    )
    writer.finish(report)
    hidden = HiddenStates.open(root / f"masked-{scheme}")
    n_masked = int(masked["is_target"].sum())
    table = statistics.table()
    assert table.filter(pl.col("offset") == 0)["n_rows"].unique().to_list() == [n_masked]
    for row in table.iter_rows(named=True):
        expected, n_rows = reference_pr(hidden, row["layer"], row["offset"], "model", False)
        assert row["n_rows"] == n_rows
        assert row["pr"] == pytest.approx(expected, abs=1e-9), row
    # Held-out loss over the masked positions, against the model run on each masked
    # sequence alone: cross-entropy of the original token at every masked position.
    losses = []
    for _, part in masked.group_by("sentence_id", maintain_order=True):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([part["input_id"].to_list()])).logits[0]
        at = np.flatnonzero(part["is_target"].to_numpy())
        targets = torch.tensor(part["token_id"].to_numpy()[at])
        losses.append(
            torch.nn.functional.cross_entropy(logits[at].double(), targets, reduction="none")
        )
    assert evaluation.count == n_masked
    assert evaluation.table()["loss"][0] == pytest.approx(float(torch.cat(losses).mean()), rel=1e-5)


def test_masked_lm_probe_needs_an_encoder(encoder):
    with pytest.raises(LayerlawsError, match="needs a masked-LM encoder"):
        probe_of("masked_lm", "llama")
    assert probe_of("next_token", "bert") == "next_token"
    facts = read_facts(encoder[1] / "m")
    assert probe_of("auto", facts.model_type) == "masked_lm"


def test_encoder_blocks_trace_and_differentiate(encoder):
    """Coupling runs on encoders too: the traced stream is the encoder's hidden states and
    a block's Jacobian equals torch.autograd.functional.jacobian of its branch."""
    from layerlaws.coupling.jacobians import jacobian_rows
    from layerlaws.models.blocks import trace_blocks

    _, root, _, tokens = encoder
    model = load_model(root / "m", "float32", "cpu", attention="eager")
    ids = torch.tensor([tokens.filter(pl.col("sentence_id") == 0)["token_id"].to_list()])
    calls, streams = trace_blocks(model, ids)
    with torch.no_grad():
        reference = model(input_ids=ids, output_hidden_states=True).hidden_states
    np.testing.assert_allclose(streams.numpy(), torch.cat(reference).numpy(), atol=1e-5)
    last = ids.shape[1] - 1
    rows = jacobian_rows(calls[1].branch, streams[1], last, [0, last], 8)
    full = torch.autograd.functional.jacobian(lambda x: calls[1].branch(x[None])[0], streams[1])
    np.testing.assert_allclose(rows[0].numpy(), full[last, :, 0, :].numpy(), atol=1e-5)
    np.testing.assert_allclose(rows[1].numpy(), full[last, :, last, :].numpy(), atol=1e-5)


def test_an_encoder_runs_through_the_workflow_under_both_probes(
    encoder_tokenizer, base_config, tmp_path
):
    """A tiny BERT as two models of one source, probed with its own masked-LM task and
    with next-token targets: the same stages run, each pass records its probe, and only
    the masked positions are rows under masked-LM."""
    from snakemake_runs import run_ok, write_config

    source = save_tiny_model(tmp_path / "bert", "bert", encoder_tokenizer)
    local = {"kind": "local", "path": str(source)}
    write_config(
        tmp_path,
        {
            "models": {
                "bert-mlm": {"source": local},
                "bert-ntp": {"source": local, "probe": "next_token"},
            },
            "datasets": base_config["datasets"],
            "runs": [
                {"model": "bert-mlm", "dataset": "mini"},
                {"model": "bert-ntp", "dataset": "mini"},
            ],
            "equilearning": {"masking": {"rate": 0.5}, "token_views": {"groups": [["is"]]}},
            "signatures": {"runs": [{"model": "bert-mlm", "dataset": "mini"}], "top_tokens": 40},
        },
    )
    run_ok(tmp_path)
    results = tmp_path / "results/equilearning"
    passes = {
        name: json.loads((results / name / "mini/pass.json").read_text())
        for name in ("bert-mlm", "bert-ntp")
    }
    assert passes["bert-mlm"]["probe"] == "masked_lm"
    assert passes["bert-ntp"]["probe"] == "next_token"
    pr = {name: pl.read_csv(results / name / "mini/pr.csv") for name in passes}
    masked_rows = pr["bert-mlm"].filter(pl.col("offset") == 0)["n_rows"][0]
    all_rows = pr["bert-ntp"].filter(pl.col("offset") == 0)["n_rows"][0]
    assert 0.35 * all_rows < masked_rows < 0.65 * all_rows
    for name in passes:
        assert (results / name / "mini/law.svg").stat().st_size > 1000
    assert (tmp_path / "results/signatures/bert-mlm/mini/rcos.csv").is_file()
