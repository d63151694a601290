"""Encoder–decoders (T5), probed with next tokens and with T5's own span corruption (He &
Su, Fig. 7; Raffel et al. 2020, §3.1.4): as He & Su's released code, one stack's layers
(the encoder's under next-token probing, the decoder's under span corruption, the decoder
reading its target; ``equilearning.encoder_decoder: one_stack``), or both stacks' layers
numbered as one series (``encoder_then_decoder``).

The references are independent of the library's hooks, batching and statistics: the
layers are transformers' own ``hidden_states`` of ``T5EncoderModel`` and
``encoder_hidden_states`` and ``decoder_hidden_states`` of the whole model, each sequence
run alone, the corruption is built (and the spans read back) by a plain walk, and the PR is
float64 ``numpy.linalg.lstsq`` on rows built by hand."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import numpy as np
import polars as pl
import pytest
import torch
from conftest import corpus_texts
from lstsq_reference import lstsq_pr, normalized
from tiny_models import WIDTH, save_tiny_model
from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from layerlaws.core.errors import LayerlawsError
from layerlaws.equilearning.equilearning_pass import EquilearningPass
from layerlaws.equilearning.evaluation import HeldOutEvaluation
from layerlaws.equilearning.settings import EquilearningSettings
from layerlaws.equilearning.statistics import EquilearningStatistics
from layerlaws.forward.kept_states import HiddenStates
from layerlaws.forward.kept_writer import HiddenStateWriter
from layerlaws.forward.masking import TARGET_OFFSETS, probe_of, probe_tokens
from layerlaws.forward.model_pass import run_forward_pass, text_rows
from layerlaws.forward.settings import MaskingSettings
from layerlaws.forward.span_corruption import (
    MEAN_SPAN_LENGTH,
    Seq2SeqVocabulary,
    encoder_decoder_tokens,
    seq2seq_vocabulary,
)
from layerlaws.models.architectures import LayerChoice
from layerlaws.models.loading import embedding_matrices, load_model, load_tokenizer
from layerlaws.models.preparation import prepare_model
from layerlaws.text.tokens import tokenize_sentences

SENTINELS = 40
ENCODER_BLOCKS = DECODER_BLOCKS = 2
PROBES = ("next_token", "span_corruption")
OFFSETS = [-1, 0, 1]
MASKING = MaskingSettings(rate=0.15, seed=3, scheme="mask_only")


def t5_tokenizer(texts: list[str]) -> PreTrainedTokenizerFast:
    """T5-like and word-level: <pad> 0 (the decoder's start), </s> 1 after every text,
    <unk> 2, then the words, then the sentinels <extra_id_0> … <extra_id_39>."""
    core = Tokenizer(models.WordLevel(unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(vocab_size=300, special_tokens=["<pad>", "</s>", "<unk>"])
    core.train_from_iterator(texts, trainer)
    core.post_processor = processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", core.token_to_id("</s>"))]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        unk_token="<unk>",
        pad_token="<pad>",
        eos_token="</s>",
        extra_special_tokens=[f"<extra_id_{k}>" for k in range(SENTINELS)],
    )


@pytest.fixture(scope="module")
def t5(tmp_path_factory):
    """A tiny random T5 (2 + 2 blocks, width 32), prepared, and the tokens of 30 texts."""
    texts = corpus_texts()
    root = tmp_path_factory.mktemp("t5")
    source = save_tiny_model(root / "source", "t5", t5_tokenizer(texts))
    facts = prepare_model({"source": {"kind": "local", "path": str(source)}}, root / "m")
    sentences = pl.DataFrame(
        {"sentence_id": list(range(30)), "text": texts[:30], "source": ["t"] * 30}
    )
    tokens = tokenize_sentences(sentences, load_tokenizer(root / "m"), max_tokens=48)
    assert tokens.group_by("sentence_id").len()["len"].n_unique() > 1  # padded batches
    return root, facts, tokens


def probed(t5, probe: str, special_tokens: str = "exclude") -> pl.DataFrame:
    """The table of both stacks (``encoder_then_decoder``) under ``probe``."""
    root, facts, tokens = t5
    tokenizer = load_tokenizer(root / "m")
    return probe_tokens(
        tokens,
        probe=probe,
        vocab_size=facts.vocab_size,
        mask_token_id=tokenizer.mask_token_id,
        masking=MASKING,
        special_tokens=special_tokens,
        encoder_decoder="encoder_then_decoder",
        seq2seq=seq2seq_vocabulary(root / "m", tokenizer),
    )


def transformers_layers(model, table: pl.DataFrame) -> tuple[np.ndarray, int]:
    """Each sequence run alone through transformers with ``output_hidden_states``: the
    states of the observed rows of ``table`` (in row order) at every layer of our
    numbering, (L + 1, n_rows, d) — encoder_hidden_states[l] at each row's encoder
    position for l ≤ L_e, decoder_hidden_states[j] at its own position for layer
    L_e + j — and L = L_e + L_d."""
    layers: list[list[np.ndarray]] = []
    ordered = table.sort("sentence_id", "position")
    for _, part in ordered.group_by("sentence_id", maintain_order=True):
        encoder = part.filter(pl.col("is_encoder"))
        decoder = part.filter(~pl.col("is_encoder"))
        with torch.no_grad():
            output = model(
                input_ids=torch.tensor([encoder["input_id"].to_list()]),
                decoder_input_ids=torch.tensor([decoder["input_id"].to_list()]),
                output_hidden_states=True,
            )
        assert len(output.encoder_hidden_states) == ENCODER_BLOCKS + 1
        assert len(output.decoder_hidden_states) == DECODER_BLOCKS + 1
        rows = decoder.filter(~pl.col("is_special"))
        at_encoder = rows["encoder_position"].to_numpy()
        at_decoder = rows["position"].to_numpy()
        states = [state[0].numpy()[at_encoder] for state in output.encoder_hidden_states]
        states += [state[0].numpy()[at_decoder] for state in output.decoder_hidden_states[1:]]
        layers.append(states)
    states = np.concatenate([np.stack(states) for states in layers], axis=1)
    return states, ENCODER_BLOCKS + DECODER_BLOCKS


def next_token_table_by_hand(tokens: pl.DataFrame) -> pl.DataFrame:
    """The encoder–decoder table of next-token probing, built without the library: the
    encoder reads the tokens; the decoder reads <pad> (never a row) then the tokens, text
    token t at decoder position t + 1 and encoder position t."""
    frames = []
    for (sentence_id,), part in tokens.sort("sentence_id", "position").group_by(
        "sentence_id", maintain_order=True
    ):
        ids = part["token_id"].to_numpy()
        positions = np.arange(len(ids))
        encoder = {
            "position": positions,
            "is_special": True,
            "input_id": ids,
            "is_encoder": True,
            "encoder_position": positions,
        }
        decoder = {
            "position": np.arange(len(ids) + 1),
            "is_special": np.concatenate([[True], part["is_special"].to_numpy()]),
            "input_id": np.concatenate([[0], ids]),
            "is_encoder": False,
            "encoder_position": np.concatenate([[0], positions]),
        }
        frames += [
            pl.DataFrame({"sentence_id": sentence_id, **columns}) for columns in (encoder, decoder)
        ]
    return pl.concat(frames)


@pytest.mark.parametrize("probe", PROBES)
def test_t5_layers_are_the_encoders_then_the_decoders_states(t5, probe):
    """Layers 0..L_e are transformers' encoder_hidden_states (the last after the encoder's
    final norm), layer L_e + j its decoder_hidden_states[j] (the last after the decoder's
    final norm): L_e + L_d + 1 = 5 layers, each compared whole, in padded batches."""
    root, facts, tokens = t5
    assert (facts.model_type, facts.num_layers, facts.hidden_size) == ("t5", 4, WIDTH)
    assert (facts.norm_type, facts.post_ln) == ("rmsnorm", False)  # T5LayerNorm is an RMSNorm
    assert probe_of("auto", "t5") == "span_corruption"
    vocabulary = seq2seq_vocabulary(root / "m", load_tokenizer(root / "m"))
    assert vocabulary.decoder_start_id == 0 and vocabulary.eos_id == 1
    assert vocabulary.sentinel_ids == tuple(range(300, 300 + SENTINELS))  # after the words
    table = probed(t5, probe)
    if probe == "next_token":
        by_hand = next_token_table_by_hand(tokens)
        columns = list(by_hand.columns)
        ours = table.select(columns).sort("sentence_id", "is_encoder", "position")
        assert ours.equals(by_hand.sort("sentence_id", "is_encoder", "position"))
    model = load_model(root / "m", "float32", "cpu")
    writer = HiddenStateWriter(root / f"h-{probe}", facts, text_rows(table), "float32", 1000)
    writer.finish(run_forward_pass(model, facts, table, [writer], 7, "cpu", progress=False))
    hidden = HiddenStates.open(root / f"h-{probe}")
    reference, last = transformers_layers(model, table)
    assert hidden.num_layers == last == facts.num_layers
    assert len(reference) == ENCODER_BLOCKS + DECODER_BLOCKS + 1
    for layer in range(hidden.num_layers + 1):
        np.testing.assert_allclose(hidden.layer(layer), reference[layer], rtol=0, atol=1e-5)
    # Layer L is the decoder's normalised output; the LM head reads it times d^-0.5.
    assert model.config.scale_decoder_outputs
    first = table.filter(pl.col("sentence_id") == 0).sort("position")
    encoder, decoder = first.filter(pl.col("is_encoder")), first.filter(~pl.col("is_encoder"))
    seen = {}
    hook = model.lm_head.register_forward_pre_hook(lambda _, args: seen.update(head=args[0]))
    with torch.no_grad():
        model(
            input_ids=torch.tensor([encoder["input_id"].to_list()]),
            decoder_input_ids=torch.tensor([decoder["input_id"].to_list()]),
        )
    hook.remove()
    observed = ~decoder["is_special"].to_numpy()
    rows = np.flatnonzero(hidden.rows["sentence_id"].to_numpy() == 0)
    np.testing.assert_allclose(
        seen["head"][0].numpy()[observed], hidden.layer(4)[rows] * WIDTH**-0.5, atol=1e-6
    )


def long_table(lengths: list[int], seed: int = 11) -> pl.DataFrame:
    """Sequences of the given numbers of text tokens (ids 10..4999), each followed by a
    special EOS (1), and one with a special token (2) amid its text."""
    rng = np.random.default_rng(seed)
    frames = []
    for sentence_id, length in enumerate(lengths):
        ids = np.concatenate([rng.integers(10, 5000, length), [1]])
        special = np.zeros(length + 1, dtype=bool)
        special[-1] = True
        if sentence_id == 0:
            ids[length // 2], special[length // 2] = 2, True
        frames.append(
            pl.DataFrame(
                {
                    "sentence_id": sentence_id,
                    "position": np.arange(length + 1, dtype=np.int32),
                    "token_id": ids,
                    "is_special": special,
                }
            )
        )
    return pl.concat(frames)


VOCABULARY = Seq2SeqVocabulary(decoder_start_id=0, eos_id=1, sentinel_ids=tuple(range(9000, 12000)))


def read_back(encoder_ids: list[int], targets: list[int]) -> tuple[list[int], list[int]]:
    """The original ids, from the encoder's input with each sentinel replaced by the target
    tokens between it and the next sentinel (or the final EOS), and the span lengths."""
    sentinel = set(VOCABULARY.sentinel_ids)
    spans: dict[int, list[int]] = {}
    current = None
    for token in targets[:-1]:
        if token in sentinel:
            current = token
            spans[current] = []
        else:
            spans[current].append(token)
    original = []
    for token in encoder_ids:
        original.extend(spans[token] if token in sentinel else [token])
    return original, [len(span) for span in spans.values()]


corrupt = partial(
    encoder_decoder_tokens,
    probe="span_corruption",
    vocabulary=VOCABULARY,
    rate=0.15,
    special_tokens="exclude",
    layout="encoder_then_decoder",
)
"""Span corruption at T5's density as T5 draws it, special tokens no rows."""


@pytest.mark.parametrize("lengths", [[20_000], [120] * 300])
def test_span_corruption_hides_spans_of_mean_length_3_that_the_target_restores(lengths):
    table = long_table(lengths)
    corrupted = corrupt(table, seed=0)
    all_spans, noise, text = [], 0, 0
    for (sentence_id,), part in corrupted.group_by("sentence_id", maintain_order=True):
        encoder = part.filter(pl.col("is_encoder")).sort("position")
        decoder = part.filter(~pl.col("is_encoder")).sort("position")
        original = table.filter(pl.col("sentence_id") == sentence_id)
        encoder_ids, targets = encoder["input_id"].to_list(), decoder["token_id"].to_list()
        # Sentinels in order, the same in the encoder's input and the target.
        in_encoder = [token for token in encoder_ids if token >= 9000]
        assert in_encoder == list(VOCABULARY.sentinel_ids[: len(in_encoder)])
        assert [token for token in targets if token >= 9000] == in_encoder
        assert targets[0] == 9000 and targets[-1] == 1 and encoder_ids[0] < 9000
        restored, spans = read_back(encoder_ids, targets)
        assert restored == original["token_id"].to_list()
        # Special tokens are never corrupted: they stay in the encoder's input.
        specials = original.filter(pl.col("is_special"))["token_id"].to_list()
        assert [token for token in encoder_ids if token < 10] == specials
        # The decoder reads its target shifted right; every target but the EOS is a row,
        # its encoder position that of its span's sentinel (the EOS: the encoder's EOS).
        assert decoder["input_id"].to_list() == [0, *targets[:-1]]
        assert decoder["is_special"].to_list() == [False] * (len(targets) - 1) + [True]
        last_sentinel = np.maximum.accumulate(
            np.where(np.array(targets) >= 9000, np.arange(len(targets)), -1)
        )
        standing_for = [targets[i] for i in last_sentinel[:-1]] + [1]
        assert [encoder_ids[i] for i in decoder["encoder_position"].to_list()] == standing_for
        n_text = int((~original["is_special"]).sum())
        assert sum(spans) == round(0.15 * n_text)  # Raffel et al.: round(n · density)
        all_spans += spans
        noise, text = noise + sum(spans), text + n_text
    assert noise / text == pytest.approx(0.15, abs=0.002)
    assert np.mean(all_spans) == pytest.approx(MEAN_SPAN_LENGTH, abs=0.05)
    assert min(all_spans) >= 1 and np.std(all_spans) > 0.5  # lengths drawn, not fixed
    again = corrupt(table, seed=0)
    assert again.equals(corrupted)
    other = corrupt(table, seed=1)
    assert not other.equals(corrupted)
    included = encoder_decoder_tokens(
        table,
        probe="span_corruption",
        vocabulary=VOCABULARY,
        rate=0.15,
        seed=0,
        special_tokens="include",
        layout="encoder_then_decoder",
    )
    # Under include the final EOS is a row too; the encoder's input never is.
    rows = included.filter(~pl.col("is_special"))
    assert not rows["is_encoder"].any()
    assert rows.height == corrupted.filter(~pl.col("is_special")).height + len(lengths)


@pytest.mark.parametrize("layout", ["encoder_then_decoder", "one_stack"])
def test_span_corruption_takes_the_masking_rate_as_its_noise_density(layout):
    """``equilearning.masking.rate`` other than T5's 0.15: at 0.3, T5's draw corrupts
    round(0.3 n) of a text's n text tokens in spans of mean length 3, the released one each
    token with probability 0.3 (runs of mean length 1 / 0.7; bounds of 4 standard
    deviations on 8,000 tokens, which 0.15 lies far outside); the text read back."""
    table = long_table([8_000])
    corrupted = corrupt(table, seed=0, rate=0.3, layout=layout)
    encoder = corrupted.filter(pl.col("is_encoder")).sort("position")
    decoder = corrupted.filter(~pl.col("is_encoder")).sort("position")
    if layout == "one_stack":  # the decoder reads the target itself
        target = [*decoder["input_id"].to_list(), decoder["token_id"][-1]]
    else:
        target = decoder["token_id"].to_list()
    restored, spans = read_back(encoder["input_id"].to_list(), target)
    assert restored == table["token_id"].to_list()
    n_text = int((~table["is_special"]).sum())
    if layout == "one_stack":
        assert sum(spans) / n_text == pytest.approx(0.3, abs=0.02)
        assert np.mean(spans) == pytest.approx(1 / 0.7, abs=0.08)
    else:
        assert sum(spans) == round(0.3 * n_text)
        assert np.mean(spans) == pytest.approx(MEAN_SPAN_LENGTH, abs=0.1)


def test_span_corruption_needs_sentinels_enough():
    few = Seq2SeqVocabulary(0, 1, (9000, 9001))
    with pytest.raises(LayerlawsError, match=r"needs \d+ sentinel tokens"):
        encoder_decoder_tokens(
            long_table([200]),
            probe="span_corruption",
            vocabulary=few,
            rate=0.15,
            seed=0,
            special_tokens="exclude",
            layout="encoder_then_decoder",
        )
    with pytest.raises(LayerlawsError, match="has none; probe it with probe: next_token"):
        encoder_decoder_tokens(
            long_table([20]),
            probe="span_corruption",
            vocabulary=Seq2SeqVocabulary(0, 1, ()),
            rate=0.15,
            seed=0,
            special_tokens="exclude",
            layout="one_stack",
        )


def rows_by_hand(table: pl.DataFrame, offset: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (among the observed rows in row order) with a target at ``offset``, and
    those targets: the decoder token ``offset`` positions on, when it is a row."""
    rows = text_rows(table.filter(~pl.col("is_encoder")))
    keyed = rows.select("sentence_id", "position", "token_id")
    lookup = {(s, p): t for s, p, t in keyed.iter_rows()}
    chosen, targets = [], []
    for index, (s, p) in enumerate(rows.select("sentence_id", "position").iter_rows()):
        if (s, p + offset) in lookup:
            chosen.append(index)
            targets.append(lookup[(s, p + offset)])
    return np.array(chosen), np.array(targets)


@pytest.mark.parametrize("probe", PROBES)
def test_the_law_of_a_t5_matches_float64_lstsq_in_both_stacks(t5, probe):
    """The per-layer PR table of the public pass (float64 model, batches of 7) against
    lstsq on transformers' own states of each stack, every layer, offset and norm."""
    root, facts, _ = t5
    table = probed(t5, probe)
    model = load_model(root / "m", "float64", "cpu")
    statistics = EquilearningStatistics(facts, OFFSETS, ["model", "none"], ["none"], shuffle_seed=0)
    evaluation = HeldOutEvaluation(TARGET_OFFSETS[probe])
    report = run_forward_pass(
        model, facts, table, [statistics], 7, "cpu", progress=False, logit_observers=[evaluation]
    )
    states, last = transformers_layers(model, table)
    ours = statistics.table()
    assert report["n_rows"] == states.shape[1] > 2 * WIDTH
    assert ours.height == (last + 1) * len(OFFSETS) * 2  # layer L as it is, under both
    pr = ours["pr"].to_numpy()
    assert np.isfinite(pr).all() and ((pr > 0) & (pr <= 1)).all()
    for row in ours.iter_rows(named=True):
        chosen, targets = rows_by_hand(table, row["offset"])
        features = states[row["layer"]][chosen]
        if row["layer"] < last and row["norm"] == "model":
            features = normalized(features, "model", "rmsnorm", facts.norm_eps)
        assert row["n_rows"] == len(chosen), row
        assert row["pr"] == pytest.approx(lstsq_pr(features, targets), abs=1e-9), row
    if probe == "next_token":
        # The held-out loss is T5's own on the text: each row's decoder position (having
        # read the tokens up to the row's) predicts the next token, as transformers' loss
        # with the text as labels scores it; rows and targets are text tokens.
        losses = []
        for _, part in table.group_by("sentence_id", maintain_order=True):
            encoder = part.filter(pl.col("is_encoder")).sort("position")
            decoder = part.filter(~pl.col("is_encoder")).sort("position")
            ids, special = decoder["input_id"].to_numpy(), decoder["is_special"].to_numpy()
            with torch.no_grad():
                logits = model(
                    input_ids=torch.tensor([encoder["input_id"].to_list()]),
                    decoder_input_ids=torch.tensor(ids[None]),
                ).logits[0]
            scored = torch.log_softmax(logits[:-1], -1)[torch.arange(len(ids) - 1), ids[1:]]
            kept = ~special[:-1] & ~special[1:]
            losses += (-scored.numpy()[kept]).tolist()
        assert evaluation.count == len(losses) > 0
        # The pass scores in float32 (``HeldOutEvaluation.observe_logits``), the reference
        # in float64: each row off by a few ε32 × (log V + |logits|), 1e-6 relative bounds it.
        assert evaluation.table()["loss"][0] == pytest.approx(np.mean(losses), rel=1e-6)
    if probe == "span_corruption":
        # The held-out loss is T5's own: transformers' loss given the targets as labels
        # (it shifts them right itself), the EOS left out as it is no row.
        losses = []
        for _, part in table.group_by("sentence_id", maintain_order=True):
            encoder = part.filter(pl.col("is_encoder")).sort("position")
            decoder = part.filter(~pl.col("is_encoder")).sort("position")
            labels = np.where(decoder["is_special"], -100, decoder["token_id"])
            with torch.no_grad():
                output = model(
                    input_ids=torch.tensor([encoder["input_id"].to_list()]),
                    labels=torch.from_numpy(labels[None]),
                )
            losses += [float(output.loss)] * int((labels >= 0).sum())
        assert evaluation.count == len(losses)
        # float32 scoring against transformers' float64 loss: 1e-6 relative, as above.
        assert evaluation.table()["loss"][0] == pytest.approx(np.mean(losses), rel=1e-6)


def test_an_encoder_decoder_is_refused_where_it_cannot_be_measured(t5):
    from layerlaws.coupling.job import job_prompts
    from layerlaws.models.blocks import trace_blocks

    root, facts, tokens = t5
    with pytest.raises(LayerlawsError, match=r"coupling .* 't5' model is an encoder–decoder"):
        job_prompts(root / "m", {}, [])
    model = load_model(root / "m", "float32", "cpu", attention="eager")
    with pytest.raises(LayerlawsError, match="measure it in equi-learning runs only"):
        trace_blocks(model, torch.tensor([[5, 6, 7, 1]]))
    with pytest.raises(LayerlawsError, match="reads a table of both its stacks"):
        run_forward_pass(model, facts, tokens, [], 4, "cpu", progress=False)
    with pytest.raises(LayerlawsError, match=r"masked_lm needs a masked-LM encoder .* seq2seq"):
        probe_of("masked_lm", "t5")
    with pytest.raises(LayerlawsError, match="span_corruption needs an encoder–decoder"):
        probe_of("span_corruption", "llama")
    assert probe_of("next_token", "t5") == "next_token"


def test_a_t5s_embeddings_and_blocks_are_found_for_signatures_and_placement(t5):
    """W_E is the shared embedding, W_U the LM head (tied); a device map places the
    decoder's blocks too."""
    from transformers import AutoConfig

    from layerlaws.models.placement import device_map
    from layerlaws.models.preparation import skeleton_of

    root, facts, _ = t5
    input_weights, output_weights, tied = embedding_matrices(root / "m")
    model = load_model(root / "m", "float32", "cpu")
    assert tied and facts.tied_embeddings
    np.testing.assert_array_equal(input_weights, model.shared.weight.numpy())
    np.testing.assert_array_equal(output_weights, model.lm_head.weight.numpy())
    skeleton = skeleton_of(AutoConfig.from_pretrained(facts.weights), False)
    plan = device_map(skeleton, torch.float32, {"cuda:0": 10**9, "cuda:1": 10**9})
    blocks = [name for name in plan if ".block." in name]
    assert blocks == [f"{stack}.block.{i}" for stack in ("encoder", "decoder") for i in range(2)]
    assert plan["encoder.block.0"] == "cuda:0" and plan["decoder.block.1"] == "cuda:1"


SETTINGS = EquilearningSettings(
    offsets=tuple(OFFSETS), norms=("model", "none"), controls=("none",), masking=MASKING
)
"""The settings of the passes below (``encoder_decoder: one_stack`` by default)."""


def t5_pass(t5, probe: str, settings: EquilearningSettings = SETTINGS) -> EquilearningPass:
    """The public equi-learning pass of the float64 tiny T5 under ``probe``, run."""
    root, facts, tokens = t5
    tokenizer = load_tokenizer(root / "m")
    pass_ = EquilearningPass.prepare(
        tokens, facts, tokenizer, settings, probe, seq2seq_vocabulary(root / "m", tokenizer)
    )
    pass_.run(load_model(root / "m", "float64", "cpu"), 7, "cpu", progress=False)
    return pass_


def lstsq_table(states: list[np.ndarray], targets_at: dict, norm_eps: float) -> pl.DataFrame:
    """PR by float64 lstsq of every layer of ``states`` ((n_rows, d) each, the last as it
    is), offset and norm of SETTINGS, the rows with a target at offset k and their targets
    being ``targets_at[k]`` (indices, token ids)."""
    last = len(states) - 1
    rows = []
    for layer, state in enumerate(states):
        for offset in OFFSETS:
            chosen, targets = targets_at[offset]
            for norm in SETTINGS.norms:
                features = state[chosen]
                if layer < last and norm == "model":
                    features = normalized(features, "model", "rmsnorm", norm_eps)
                pr = lstsq_pr(features, targets)
                rows.append({"layer": layer, "offset": offset, "norm": norm, "pr": pr})
    return pl.DataFrame(rows)


def assert_pr_of_states(pass_: EquilearningPass, states: list, rows_of: dict) -> None:
    """The pass's PR rows (control none) equal lstsq's on ``states`` (per sequence, a
    list over layers of (rows, d) arrays, the rows of the sequence's positions in order),
    every layer, offset and norm, ``rows_of[s]`` the token ids of sequence s's rows."""
    lengths = [len(each[0]) for each in states]
    layers = [np.concatenate([each[layer] for each in states]) for layer in range(len(states[0]))]
    reference = lstsq_table(layers, by_offset(lengths, rows_of), pass_.facts.norm_eps)
    keys = ["layer", "offset", "norm"]
    ours = pass_.tables()["pr"]
    assert ours["n_rows"].max() == sum(lengths) > 2 * WIDTH
    ours = ours.filter(pl.col("control") == "none").sort(keys)
    reference = reference.sort(keys)
    assert ours.select(keys).equals(reference.select(keys))
    np.testing.assert_allclose(ours["pr"].to_numpy(), reference["pr"].to_numpy(), rtol=0, atol=1e-9)


def by_offset(lengths: list[int], rows_of: dict) -> dict:
    """For each offset k: the rows (their indices over all sequences, in order) whose
    position p + k is a row of the same sequence, and the target there; ``rows_of[s]`` the
    targets (token ids) of sequence s's rows by position."""
    targets_at = {}
    for offset in OFFSETS:
        chosen, targets, start = [], [], 0
        for sentence, length in enumerate(lengths):
            for position in range(length):
                if 0 <= position + offset < length:
                    chosen.append(start + position)
                    targets.append(rows_of[sentence][position + offset])
            start += length
        targets_at[offset] = (np.array(chosen), np.array(targets))
    return targets_at


def test_t5_next_token_regresses_the_encoders_own_hidden_states(t5):
    """As He & Su's released code (T5EncoderModel): every text token (EOS included, under
    special_tokens: include) a row of the encoder's layers 0..L_e alone, the next token at
    offset +1; the PR of every layer, offset and norm equal to lstsq on transformers'
    T5EncoderModel ``hidden_states`` of each text run alone."""
    from transformers import T5EncoderModel

    _, facts, tokens = t5
    pass_ = t5_pass(t5, "next_token", replace(SETTINGS, special_tokens="include"))
    assert pass_.layers == LayerChoice(stack="encoder")
    assert pass_.facts.num_layers == ENCODER_BLOCKS and facts.num_layers == 4
    encoder = T5EncoderModel.from_pretrained(facts.weights, dtype=torch.float64).eval()
    states, rows_of = [], {}
    for sentence, part in enumerate(
        tokens.sort("sentence_id", "position").partition_by("sentence_id", maintain_order=True)
    ):
        ids = part["token_id"].to_list()
        with torch.no_grad():
            hidden = encoder(input_ids=torch.tensor([ids]), output_hidden_states=True)
        states.append([layer[0].numpy() for layer in hidden.hidden_states])
        rows_of[sentence] = ids
    assert len(states[0]) == ENCODER_BLOCKS + 1
    assert_pr_of_states(pass_, states, rows_of)


def released_corruption(tokens: pl.DataFrame, vocabulary: Seq2SeqVocabulary) -> list:
    """He & Su's ``corrupt_text`` on ids, by a plain walk: each text token corrupted with
    probability MASKING.rate (one generator seeded MASKING.seed, a draw per text token of
    each sequence in order), each run of corrupted tokens one sentinel in the encoder's
    input and, in the target, the sentinel followed by the run; EOS ends both. Sequences
    with no corrupted token are left out. [(encoder ids, target ids)]"""
    rng = np.random.default_rng(MASKING.seed)
    pairs = []
    for part in tokens.sort("sentence_id", "position").partition_by(
        "sentence_id", maintain_order=True
    ):
        text = part.filter(~pl.col("is_special"))["token_id"].to_list()
        assert part["is_special"].to_list() == [False] * len(text) + [True]  # EOS last
        corrupted = rng.random(len(text)) < MASKING.rate
        if not corrupted.any():
            continue
        encoder, target, spans = [], [], 0
        for index, token in enumerate(text):
            if corrupted[index]:
                if index == 0 or not corrupted[index - 1]:
                    encoder.append(vocabulary.sentinel_ids[spans])
                    target.append(vocabulary.sentinel_ids[spans])
                    spans += 1
                target.append(token)
            else:
                encoder.append(token)
        pairs.append(([*encoder, vocabulary.eos_id], [*target, vocabulary.eos_id]))
    return pairs


def test_t5_span_corruption_regresses_the_decoders_states_reading_its_target(t5):
    """As He & Su's released code (get_features_only_sc): the decoder reads the target
    (sentinel, span, …, EOS) as its input, its layers 0..L_d alone, each position's state
    regressed on the next target token (offset 0 of our rows); the PR of every layer,
    offset and norm equal to lstsq on transformers' ``decoder_hidden_states`` of each
    corrupted text run alone, the corruption built by hand."""
    from transformers import AutoModelForSeq2SeqLM

    root, facts, tokens = t5
    pass_ = t5_pass(t5, "span_corruption", replace(SETTINGS, special_tokens="include"))
    assert pass_.layers == LayerChoice(stack="decoder")
    assert pass_.facts.num_layers == DECODER_BLOCKS
    vocabulary = seq2seq_vocabulary(root / "m", load_tokenizer(root / "m"))
    model = AutoModelForSeq2SeqLM.from_pretrained(facts.weights, dtype=torch.float64).eval()
    states, rows_of, losses = [], {}, []
    pairs = released_corruption(tokens, vocabulary)
    assert 20 < len(pairs) <= 30
    for sentence, (encoder, target) in enumerate(pairs):
        with torch.no_grad():
            output = model(
                input_ids=torch.tensor([encoder]),
                decoder_input_ids=torch.tensor([target]),
                output_hidden_states=True,
            )
        # The released code's rows: every position but the last, the next target token.
        states.append([layer[0, :-1].numpy() for layer in output.decoder_hidden_states])
        rows_of[sentence] = target[1:]
        scores = torch.log_softmax(output.logits[0, :-1], -1)
        losses += (-scores[torch.arange(len(target) - 1), target[1:]]).tolist()
    assert len(states[0]) == DECODER_BLOCKS + 1
    assert_pr_of_states(pass_, states, rows_of)
    # The held-out loss: T5's logits at each row scored on its next target token.
    evaluation = pass_.tables()["evaluation"]
    assert pass_.observers.evaluated and evaluation["n_predictions"][0] == len(losses)
    # The pass scores in float32 (``HeldOutEvaluation.observe_logits``): each row's loss
    # off by a few float32 roundings of its log-sum-exp (≈ 1e-7 × |log V + logits|, about
    # 1e-6 here), the reference in float64; their mean alike.
    assert evaluation["loss"][0] == pytest.approx(np.mean(losses), rel=1e-6)


def test_released_span_corruption_corrupts_each_token_alone():
    """one_stack's corruption on 20,000 tokens: each text token corrupted independently
    with probability 0.15 (runs of corrupted tokens geometric, of mean 1 / 0.85), each run
    one sentinel span; the text read back from the encoder's input and the target; the
    decoder reads the target but its last token and each row's id is the token after the
    one it reads; the same under a seed, other spans under another."""
    table = long_table([20_000])
    released = partial(corrupt, layout="one_stack")
    corrupted = released(table, seed=0)
    encoder = corrupted.filter(pl.col("is_encoder")).sort("position")
    decoder = corrupted.filter(~pl.col("is_encoder")).sort("position")
    encoder_ids = encoder["input_id"].to_list()
    target = [*decoder["input_id"].to_list(), decoder["token_id"][-1]]
    assert decoder["token_id"].to_list() == target[1:] and target[0] == 9000
    assert decoder["is_special"].to_list() == [False] * (len(target) - 2) + [True]
    restored, spans = read_back(encoder_ids, target)
    assert restored == table["token_id"].to_list()
    noise = sum(spans)
    assert noise / 19_999 == pytest.approx(0.15, abs=0.01)
    assert np.mean(spans) == pytest.approx(1 / 0.85, abs=0.03)
    # Runs are maximal: no two sentinels side by side in the encoder's input.
    sentinel = np.array(encoder_ids) >= 9000
    assert not (sentinel[1:] & sentinel[:-1]).any()
    assert released(table, seed=0).equals(corrupted)
    assert not released(table, seed=1).equals(corrupted)


@pytest.mark.parametrize("probe", PROBES)
def test_the_encoder_then_decoder_setting_keeps_the_series_of_both_stacks(t5, probe):
    """Under encoder_decoder: encoder_then_decoder the public pass regresses both stacks
    as one series, layers 0..L_e + L_d, on the table of both stacks: its PR table is that
    of the pass over that table (``test_the_law_of_a_t5_matches_float64_lstsq_in_both_stacks``
    checks it against lstsq on transformers' states)."""
    root, facts, _ = t5
    pass_ = t5_pass(t5, probe, replace(SETTINGS, encoder_decoder="encoder_then_decoder"))
    assert pass_.layers == LayerChoice(stack="both") and pass_.facts.num_layers == 4
    assert pass_.tokens.equals(probed(t5, probe))
    statistics = EquilearningStatistics(facts, OFFSETS, SETTINGS.norms, ["none"], shuffle_seed=0)
    model = load_model(root / "m", "float64", "cpu")
    run_forward_pass(model, facts, probed(t5, probe), [statistics], 7, "cpu", progress=False)
    ours, series = pass_.tables()["pr"], statistics.table()
    assert sorted(ours["layer"].unique()) == list(range(ENCODER_BLOCKS + DECODER_BLOCKS + 1))
    keys = ["layer", "offset", "norm"]
    ours = ours.filter(pl.col("control") == "none").sort(keys)
    assert ours.select(keys).equals(series.sort(keys).select(keys))
    np.testing.assert_allclose(
        ours["pr"].to_numpy(), series.sort(keys)["pr"].to_numpy(), rtol=1e-12
    )


@pytest.mark.parametrize("probe", PROBES)
def test_the_python_api_measures_a_t5_in_memory_as_the_pass_does(t5, probe):
    """``api.equilearning_law`` on the T5 loaded in memory: its probe, one stack's layers
    (the default), and its PR table equal to the pass's (which the lstsq tests above
    check)."""
    from layerlaws import api

    root, _, _ = t5
    model = load_model(root / "m", "float64", "cpu")
    texts = corpus_texts()[:30]
    law = api.equilearning_law(
        model,
        load_tokenizer(root / "m"),
        api.Texts(texts, max_tokens=48),
        SETTINGS,
        probe=probe,
        progress=False,
    )
    assert law.report["probe"] == probe
    expected = t5_pass(t5, probe).tables()["pr"]
    assert law.pr.height == expected.height == 3 * len(OFFSETS) * len(SETTINGS.norms)
    np.testing.assert_allclose(law.pr["pr"].to_numpy(), expected["pr"].to_numpy(), rtol=1e-9)
