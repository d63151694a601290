"""Benchmark: a mutation score, how well the test suite catches real mistakes in the library.

``MUTATIONS`` lists named mistakes in the formulas and plumbing of ``layerlaws``: each is a
file under ``layerlaws/``, an exact ``old`` snippet that occurs in that file exactly once
(the script stops, naming the mutation, when it occurs 0 or 2+ times), its ``new``
replacement (a change of value, never of syntax: the mutated module must import) and the
tests that should catch it.

How a mutation is applied: the ``layerlaws/`` package is copied (``shutil.copytree``) into
a ``tempfile.TemporaryDirectory()``, the replacement is made in the copy only, and the tests
run in a subprocess from the repository root,
``python -P -m pytest -x -q -p no:cacheprovider -p no:xdist -m <marker> <tests>``, with
PYTHONPATH the copy's folder, then the repository root, and PYTHONSAFEPATH set: no Python
process of the run (pytest, the ``python -m snakemake`` and job scripts of workflow tests)
puts the repository root, whose unmutated ``layerlaws/`` would shadow the copy, first on
``sys.path``, so ``import layerlaws`` resolves to the mutated copy everywhere. Before the
loop the script checks that it does, with ``python -c`` and with a test run by pytest, and
before each mutation that the mutated module imports, from the copy. The library in the
repository is never written to (its files' digests are compared at the end, and a change,
which only another process can have made, is reported), and the copy, with pytest's
temporary folders (``--basetemp``), is removed afterwards.

The tests of a mutation run twice at most: first its unit-level tests (``-m "not slow"``,
the fast ones), then, only if they let it survive, its slow ones (``-m slow``: Snakemake
workflows and real models). A mutation is killed when its tests fail (pytest's exit status
1); a run past ``--time-limit`` seconds (default 300) is not a kill and says so, and neither
is a failure to import or collect (exit status 2–4, or an ImportError, SyntaxError or
NameError in the output: the mutation broke the code rather than its values; such a
mutation is reported as BROKEN). One line per mutation, e.g.

    killed    nan_pr                        unit  (tests/equilearning/test_regression.py::…, 6.1 s)

then, as the last line, exactly ``mutations_killed=<k>/<n> seconds=<s>`` (s: total wall
seconds, rounded). ``--baseline`` first runs the selected mutations' tests on an unmutated
copy and stops if any of them fails there (a kill is only meaningful if the tests pass on
the library as it is).

Usage:
    .venv/bin/python bench/mutations.py [--only NAME [NAME ...]] [--list] [--baseline]
                                        [--time-limit SECONDS]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = "layerlaws"
TIME_LIMIT = 300
"""Seconds one pytest run of a mutation may take (default of ``--time-limit``)."""
CHECK_LIMIT = 120
"""Seconds the checks that the copy is what is imported may take."""
PYTEST = ("-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist")
"""pytest without its cache (nothing written into the repository) and in one process."""
UNIT, SLOW = "not slow", "slow"
"""The marker expressions of the two runs: unit-level tests first, then slow ones."""
BROKEN_OUTPUT = re.compile(r"\b(ImportError|ModuleNotFoundError|SyntaxError|NameError)\b")
"""Output of a run that failed because the code broke, not because a value changed."""
FAILED_TEST = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)
"""The node id pytest's short summary gives a failed test (``-ra``, the project's addopts)."""


class MutationError(RuntimeError):
    """A mutation that cannot be applied, or a check of the set-up that failed."""


@dataclass(frozen=True)
class Mutation:
    """One named mistake: ``old`` → ``new`` in ``file`` (relative to ``layerlaws/``),
    which ``tests`` (pytest node ids or files) should catch."""

    name: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    what: str
    """What the mistake is, in a few words."""


MUTATIONS = (
    Mutation(
        "nan_pr",
        "equilearning/regression.py",
        "pr = np.where(target_variance > 0, residual / target_variance, np.nan)",
        "pr = np.where(target_variance > 0, np.nan, residual / target_variance)",
        ("tests/equilearning/test_regression.py",),
        "the prediction residual PR is NaN wherever the target varies",
    ),
    Mutation(
        "spearman_rcos",
        "core/geometry.py",
        "return float(np.corrcoef(off_diagonal(first), off_diagonal(second))[0, 1])",
        "return float(np.corrcoef(*(off_diagonal(m).argsort().argsort() "
        "for m in (first, second)))[0, 1])",
        ("tests/signatures/test_signatures.py", "tests/core/test_geometry.py"),
        "R_cos is Spearman's rank correlation instead of Pearson's",
    ),
    Mutation(
        "law_drops_layer_one",
        "equilearning/law.py",
        'blocks = pr_table.filter(pl.col("layer") >= 1)',
        'blocks = pr_table.filter(pl.col("layer") >= 2)',
        ("tests/equilearning/test_law.py",),
        "the log-linear law is fitted over layers 2…L instead of 1…L",
    ),
    Mutation(
        "miscoupling_over_diagonal",
        "coupling/miscoupling.py",
        "total = torch.linalg.matrix_norm(couplings)",
        "total = torch.linalg.matrix_norm(torch.diag_embed(couplings.diagonal(0, -2, -1)))",
        ("tests/coupling/test_coupling.py", "tests/coupling/test_released_metrics.py"),
        "m̃(A) is normalised by ‖Diag A‖_F instead of ‖A‖_F",
    ),
    Mutation(
        "jacobian_keeps_identity",
        "models/blocks.py",
        "return output - stream.to(output.device)",
        "return output",
        ("tests/coupling/test_coupling.py",),
        "the block's branch is F(X), not F(X) − X: J keeps the identity",
    ),
    Mutation(
        "special_rows_always_dropped",
        "forward/model_pass.py",
        "return tokens.with_columns(is_special=pl.lit(False))",
        "return tokens",
        ("tests/equilearning/test_equilearning.py::test_special_tokens_included_as_he_and_su",),
        "BOS and other special rows are dropped even under special_tokens: include",
    ),
    Mutation(
        "target_offset_off_by_one",
        "equilearning/statistics.py",
        '(pl.col("position") + offset).alias("position")',
        '(pl.col("position") + offset + 1).alias("position")',
        (
            "tests/equilearning/test_equilearning.py::"
            "test_targets_never_cross_sequences_or_use_special_tokens",
        ),
        "the target of offset k is the token k + 1 positions on",
    ),
    Mutation(
        "rms_norm_wrong_eps",
        "equilearning/norms.py",
        "return x / torch.sqrt(_mean_square(x) + eps)",
        "return x / torch.sqrt(_mean_square(x) + 1e-5)",
        ("tests/equilearning/test_norms.py",),
        "the RMSNorm of the model norm uses LayerNorm's default eps, not the model's",
    ),
    Mutation(
        "present_shuffle_unshuffled",
        "equilearning/statistics.py",
        "mapping[present] = np.random.default_rng(shuffle_seed).permutation(present)",
        "mapping[present] = present",
        ("tests/equilearning/test_equilearning.py",),
        "the shuffled_vocab control (shuffle: present) maps every id to itself",
    ),
    Mutation(
        "vocabulary_shuffle_unshuffled",
        "equilearning/statistics.py",
        "return np.random.default_rng(shuffle_seed).permutation(vocab_size)",
        "return np.arange(vocab_size)",
        ("tests/equilearning/test_equilearning.py",),
        "the shuffled_vocab control (shuffle: vocabulary) maps every id to itself",
    ),
    Mutation(
        "fuzziness_open_sums_doubled",
        "equilearning/fuzziness.py",
        "closing[torch.from_numpy(held)] += self.open[key].gather(plan.closing_slots[held])",
        "closing[torch.from_numpy(held)] += 2 * self.open[key].gather(plan.closing_slots[held])",
        ("tests/equilearning/test_fuzziness.py",),
        "a class's sum held over batches is counted twice when the class closes",
    ),
    Mutation(
        "fuzziness_within_is_total",
        "equilearning/fuzziness.py",
        'within = total.comoment.to("cpu") / n - between',
        'within = total.comoment.to("cpu") / n',
        ("tests/equilearning/test_fuzziness.py",),
        "SS_w is the total scatter, not the total minus SS_b",
    ),
    Mutation(
        "lss_window_off_by_one",
        "coupling/trajectories.py",
        "trajectory[max(layer - half, 1) - 1 : min(layer + half, layers) + 1]",
        "trajectory[max(layer - half, 1) - 1 : min(layer + half, layers)]",
        ("tests/coupling/test_coupling.py",),
        "the LSS window of block l stops one step short",
    ),
    Mutation(
        "r_order_reversed",
        "synthetic/tasks.py",
        "np.abs(values[:, None] - values[None, :])",
        "-np.abs(values[:, None] - values[None, :])",
        ("tests/synthetic/test_synthetic.py::test_r_order_is_pearson_on_the_off_diagonal_pairs",),
        "R_order correlates with −|α − α′|: the ranking is reversed",
    ),
    Mutation(
        "merge_sign",
        "equilearning/regression.py",
        "self.comoment + other.comoment + torch.outer(delta, delta) * (self.n * other.n / n)",
        "self.comoment + other.comoment - torch.outer(delta, delta) * (self.n * other.n / n)",
        ("tests/equilearning/test_regression.py",),
        "Chan, Golub & LeVeque's merge subtracts the mean-shift term",
    ),
    Mutation(
        "merge_in_place_mean_weight",
        "equilearning/regression.py",
        "self.mean.add_(delta, alpha=other.n / n)",
        "self.mean.add_(delta, alpha=self.n / n)",
        ("tests/equilearning/test_fuzziness.py",),
        "the in-place merge moves the mean by the wrong share",
    ),
    Mutation(
        "streamed_rows_shift_weight",
        "equilearning/regression.py",
        "self.comoment.addr_(delta, delta, alpha=self.n * len(z) / total)",
        "self.comoment.addr_(delta, delta, alpha=self.n / total)",
        ("tests/equilearning/test_equilearning.py",),
        "rows merged into the moments weigh the mean shift without the batch's size",
    ),
    Mutation(
        "lacking_rows_kept",
        "equilearning/statistics.py",
        "rows = total if lacking is None else total - lacking",
        "rows = total",
        ("tests/equilearning/test_equilearning.py",),
        "rows without a target (sequence ends) stay in the regression, with target 0",
    ),
    Mutation(
        "standardize_ddof_one",
        "equilearning/norms.py",
        "std = torch.sqrt(_mean_square(centred))",
        "std = torch.sqrt(_mean_square(centred) * x.shape[1] / (x.shape[1] - 1))",
        ("tests/equilearning/test_norms.py",),
        "standardize divides by the sample standard deviation (ddof = 1)",
    ),
    Mutation(
        "eigenvalue_cutoff_absolute",
        "equilearning/regression.py",
        "keep = eigenvalues > cutoff * max(eigenvalues.max(), 0.0)",
        "keep = eigenvalues > cutoff",
        ("tests/equilearning/test_regression.py",),
        "the pseudo-inverse drops eigenvalues below the cutoff itself, not cutoff × largest",
    ),
    Mutation(
        "held_out_loss_in_bits",
        "equilearning/evaluation.py",
        'loss = self.loss_sum / self.count if self.count else float("nan")',
        'loss = self.loss_sum / math.log(2) / self.count if self.count else float("nan")',
        ("tests/equilearning/test_evaluation.py",),
        "the held-out loss is reported in bits instead of nats",
    ),
    Mutation(
        "bits_per_byte_in_nats",
        "equilearning/evaluation.py",
        'return self.loss_sum / math.log(2) / units if units else float("nan")',
        'return self.loss_sum / units if units else float("nan")',
        ("tests/equilearning/test_evaluation.py",),
        "bits per byte are nats per byte",
    ),
    Mutation(
        "top_k_off_by_one",
        "coupling/jacobians.py",
        "return u[:, :k], s[:k], vh[:k].T",
        "return u[:, 1 : k + 1], s[1 : k + 1], vh[1 : k + 1].T",
        ("tests/coupling/test_coupling.py",),
        "the full SVD's top-K singular triplets start at the second one",
    ),
    Mutation(
        "bigrams_cross_sequences",
        "text/tokens.py",
        "following[:-1] = (sentence[1:] == sentence[:-1]) & ~special[1:] & ~special[:-1]",
        "following[:-1] = ~special[1:] & ~special[:-1]",
        ("tests/signatures/test_counting.py",),
        "a sequence's last token gets the next sequence's first as its successor",
    ),
    Mutation(
        "masking_rate_doubled",
        "forward/masking.py",
        "chosen = text & (rng.random(count) < rate)",
        "chosen = text & (rng.random(count) < 2 * rate)",
        (
            "tests/forward/test_encoders.py::"
            "test_mask_only_turns_every_chosen_token_into_the_mask_token",
            "tests/forward/test_encoders.py::"
            "test_bert_masks_follow_the_80_10_10_rule_within_binomial_bounds",
        ),
        "masked-LM probing masks twice the configured share of tokens",
    ),
    Mutation(
        "expodistance_unsquared_mean",
        "coupling/trajectories.py",
        "return float(rates.var() / rates.mean() ** 2)",
        "return float(rates.var() / abs(rates.mean()))",
        ("tests/coupling/test_coupling.py",),
        "ED divides Var(α) by |Mean α| instead of (Mean α)²",
    ),
    Mutation(
        "equidistance_ddof_one",
        "coupling/trajectories.py",
        "return float(lengths.std() / lengths.mean())",
        "return float(lengths.std(ddof=1) / lengths.mean())",
        ("tests/coupling/test_coupling.py",),
        "the equidistance CV uses the sample standard deviation (ddof = 1)",
    ),
    Mutation(
        "deciles_off_by_one",
        "signatures/comparison.py",
        "return np.minimum((embedding_percentile // 10).astype(np.int64), 9) + 1",
        "return np.minimum((embedding_percentile // 10).astype(np.int64), 9)",
        ("tests/signatures/test_signatures.py",),
        "similarity deciles are numbered 0–9 instead of 1–10",
    ),
    Mutation(
        "percentiles_without_midpoint",
        "signatures/comparison.py",
        "((stats.rankdata(values) - 0.5) * (100.0 / len(values)))",
        "(stats.rankdata(values) * (100.0 / len(values)))",
        ("tests/signatures/test_signatures.py",),
        "percentiles are rank / n, not (rank − ½) / n",
    ),
    Mutation(
        "per_token_diagonal_swapped",
        "signatures/comparison.py",
        "keep = 0.0 if include_diagonal else 1.0",
        "keep = 1.0 if include_diagonal else 0.0",
        ("tests/signatures/test_signatures.py",),
        "per-token correlations leave the diagonal out when told to keep it, and back",
    ),
    Mutation(
        "epoch_batches_overlap",
        "training/plan.py",
        "bounds = within * n_sequences // per_epoch, (within + 1) * n_sequences // per_epoch",
        "bounds = within * n_sequences // per_epoch, (within + 1) * n_sequences // per_epoch + 1",
        ("tests/training/test_epochs.py::test_an_epoch_reads_every_sequence_exactly_once",),
        "an epoch's steps each read one sequence of the next step's batch too",
    ),
    Mutation(
        "token_budget_per_batch_of_texts",
        "training/packing.py",
        "rows = min(rows, self.limit - self.sequences)",
        "rows = min(rows, self.limit)",
        ("tests/training/test_epochs.py::test_a_token_budget_stops_the_packing_at_its_sequences",),
        "a token budget caps each batch of texts packed, not the whole corpus",
    ),
    Mutation(
        "ffn_gradient_ignores_relu",
        "synthetic/models.py",
        "        hidden_gradient *= summed > 0",
        "        hidden_gradient *= summed != 0",
        (
            "tests/synthetic/test_synthetic.py::"
            "test_the_gradients_by_hand_equal_autograd_through_the_models_definition",
        ),
        "F_ffn's hand-written backward pass lets the gradient through the ReLU where it is off",
    ),
    Mutation(
        "trained_separator_as_text",
        "text/tokens.py",
        "special = part.ravel() == separator_id",
        "special = part.ravel() < 0",
        (
            "tests/text/test_tokens.py::"
            "test_packed_sequences_become_shards_whose_bigrams_stay_within_texts",
            "tests/signatures/test_own_corpus.py",
        ),
        "the trained tokens' counts take the separator between texts for a text token",
    ),
    Mutation(
        "t5_decoder_reads_shifted_text",
        "forward/span_corruption.py",
        "special[0], inputs = True, sequence.targets",
        "special[0] = True",
        ("tests/forward/test_encoder_decoder.py",),
        "under next_token T5's decoder reads the text shifted right: row t has not read token t",
    ),
    Mutation(
        "span_encoder_position_shifted",
        "forward/span_corruption.py",
        "targets.append(vocabulary.sentinel_ids[span_of[position]])\n"
        "            encoder_positions.append(sentinel_at[-1])",
        "targets.append(vocabulary.sentinel_ids[span_of[position]])\n"
        "            encoder_positions.append(sentinel_at[-1] + 1)",
        ("tests/forward/test_encoder_decoder.py",),
        "a span corruption sentinel's row reads the encoder one position after its sentinel",
    ),
    Mutation(
        "t5_span_corruption_both_stacks",
        "forward/settings.py",
        'return "encoder" if probe == "next_token" else "decoder"',
        'return "encoder" if probe == "next_token" else "both"',
        (
            "tests/forward/test_encoder_decoder.py::"
            "test_t5_span_corruption_regresses_the_decoders_states_reading_its_target",
        ),
        "under encoder_decoder: one_stack, span corruption regresses both of T5's stacks",
    ),
    Mutation(
        "t5_released_corruption_in_t5_spans",
        "forward/span_corruption.py",
        "noise = rng.random(int((~special).sum())) < rate",
        "noise = noise_mask(int((~special).sum()), rate, rng)",
        (
            "tests/forward/test_encoder_decoder.py::"
            "test_released_span_corruption_corrupts_each_token_alone",
            "tests/forward/test_encoder_decoder.py::"
            "test_t5_span_corruption_regresses_the_decoders_states_reading_its_target",
        ),
        "He & Su's corruption (each token alone) draws T5's spans of mean length 3 instead",
    ),
    Mutation(
        "layer_states_ignored",
        "forward/masking.py",
        'hidden_states=layer_states == "hidden_states"',
        "hidden_states=False",
        ("tests/equilearning/test_layer_states.py",),
        "equilearning.layer_states: hidden_states leaves Mamba's and RWKV's layers as block inputs",
    ),
    Mutation(
        "hidden_states_keep_the_embeddings",
        "models/blocks.py",
        "inputs = [*blocks[1:], module_at(model, architecture.final_norm)]",
        "inputs = [*blocks[:-1], module_at(model, architecture.final_norm)]",
        ("tests/models/test_layer_indexing.py", "tests/equilearning/test_layer_states.py"),
        "He & Su's numbering of Mamba and RWKV keeps the embeddings and drops block L − 1's output",
    ),
    Mutation(
        "fp4_loads_as_nf4",
        "models/quantization.py",
        "load_in_4bit=True, bnb_4bit_quant_type=quantization, bnb_4bit_compute_dtype=dtype",
        'load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype',
        ("tests/models/test_quantization.py",),
        "quantization: fp4 (the authors' load_in_4bit) quantises to nf4",
    ),
    Mutation(
        "jacobian_draw_unseeded",
        "coupling/subset.py",
        'np.random.default_rng((prompt_set["jacobian_seed"], position))',
        "np.random.default_rng(position)",
        ("tests/coupling/test_subset.py",),
        "the Jacobian prompts drawn from each dataset ignore jacobian_seed",
    ),
    Mutation(
        "fig8_on_m_tilde",
        "series/plots.py",
        "metric = GENERALISATION_METRIC if GENERALISATION_METRIC in measured else PAPER_METRIC",
        "metric = PAPER_METRIC",
        ("tests/series/test_score_fits.py",),
        "Figs. 1a and 8 fit the scores against m̃, not m as §5.4 aggregates it",
    ),
    Mutation(
        "dataset_coupling_first_prompt",
        "coupling/per_prompt.py",
        'miscoupling_all=pl.col("miscoupling_all").mean(),',
        'miscoupling_all=pl.col("miscoupling_all").first(),',
        ("tests/coupling/test_per_prompt.py",),
        "a dataset's coupling is its first prompt's, not the mean over its prompts",
    ),
    Mutation(
        "prompt_length_panel_unsigned",
        "coupling/per_prompt.py",
        'coupling=-pl.col("miscoupling_all"),',
        'coupling=pl.col("miscoupling_all"),',
        ("tests/coupling/test_per_prompt.py",),
        "the prompt-length panel draws mis-coupling m where it says coupling −m",
    ),
    Mutation(
        "orca_without_stand_in",
        "rehearsal/standins.py",
        '(r"orca-2", "llama"),',
        '(r"orca-3", "llama"),',
        ("tests/rehearsal/test_rehearsal.py",),
        "the fine-tuned Orca 2 models have no stand-in family for the rehearsal",
    ),
    Mutation(
        "whole_source_steps_by_factor",
        "rehearsal/counts.py",
        'training["steps"] = max(divided(training["steps"], factor), kept)',
        'training["steps"] = max(training["steps"], kept)',
        ("tests/rehearsal/test_rehearsal.py",),
        "a whole-source training's steps are divided once by the rehearsal's factor, not twice",
    ),
    Mutation(
        "whole_source_stand_in_per_row",
        "rehearsal/standins.py",
        "read, margin = (rows, WHOLE_SOURCE_MARGIN) if whole else (texts, SAMPLE_MARGIN)",
        "read, margin = (texts, WHOLE_SOURCE_MARGIN) if whole else (texts, SAMPLE_MARGIN)",
        ("tests/rehearsal/test_rehearsal.py",),
        "a whole-source stand-in holds the training's sequences in each row, not in all",
    ),
    Mutation(
        "llama_heads_free",
        "training/plan.py",
        'FREE_HEAD_FAMILIES = ("qwen2",)',
        'FREE_HEAD_FAMILIES = ("qwen2", "llama")',
        ("tests/training/test_qwen2_training.py",),
        "a Llama training may have heads that do not fill its hidden size",
    ),
    Mutation(
        "t5_encoder_pass_whole_parameters",
        "forward/costs.py",
        "            parameters=self.encoder_parameters,\n",
        "            parameters=self.parameters,\n",
        ("tests/pipeline/test_job_needs.py",),
        "T5's encoder-alone pass is planned with the whole model's parameters",
    ),
    Mutation(
        "fit_subset_lower_bound_inclusive",
        "series/summary.py",
        "inside &= value > lower",
        "inside &= value >= lower",
        ("tests/series/test_fit_subsets.py",),
        "a fit subset's lower bound includes its value (score > 45 taking 45)",
    ),
    Mutation(
        "token_group_absent_token_zero",
        "signatures/token_groups.py",
        "    signature_cos[~present, :] = np.nan\n",
        "    signature_cos[~present, :] = 0.0\n",
        ("tests/signatures/test_token_groups.py",),
        "a group's token absent from the corpus gets cosines of 0, not NaN",
    ),
)


@dataclass(frozen=True)
class Run:
    """One pytest run: its exit status (None: stopped at the time limit), wall seconds and
    output."""

    returncode: int | None
    seconds: float
    output: str


@dataclass(frozen=True)
class Outcome:
    """What became of one mutation."""

    mutation: Mutation
    status: str
    """``killed``, ``SURVIVED``, ``TIMEOUT`` or ``BROKEN``."""
    level: str
    """``unit`` or ``slow``: the tests that killed it (or ran last)."""
    seconds: float
    detail: str
    """The test that failed, or why it was not a kill."""

    @property
    def killed(self) -> bool:
        return self.status == "killed"


def mutated_source(mutation: Mutation, source: str) -> str:
    """``source`` with ``mutation.old`` replaced by ``mutation.new``; a MutationError naming
    the mutation unless ``old`` occurs exactly once (and differs from ``new``)."""
    count = source.count(mutation.old)
    if count != 1:
        raise MutationError(
            f"mutation {mutation.name}: its old snippet occurs {count} times in "
            f"{PACKAGE}/{mutation.file} (exactly once expected): {mutation.old!r}"
        )
    if mutation.old == mutation.new:
        raise MutationError(f"mutation {mutation.name}: old and new are the same")
    return source.replace(mutation.old, mutation.new)


def check_snippets(mutations: tuple[Mutation, ...]) -> None:
    """Every mutation applies to the library as it is now (names distinct, snippets found
    exactly once), before anything runs."""
    names = [mutation.name for mutation in mutations]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise MutationError(f"mutation names used twice: {', '.join(repeated)}")
    for mutation in mutations:
        mutated_source(mutation, (REPO / PACKAGE / mutation.file).read_text())


def copy_package(into: Path, mutation: Mutation | None) -> Path:
    """Copy ``layerlaws/`` into the folder ``into`` (without byte code) and apply
    ``mutation`` (None: none) to the copy; returns ``into``."""
    shutil.copytree(
        REPO / PACKAGE, into / PACKAGE, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    if mutation is not None:
        target = into / PACKAGE / mutation.file
        target.write_text(mutated_source(mutation, target.read_text()))
    return into


def child_environment(copy_root: Path) -> dict[str, str]:
    """The environment of the runs and of every process they start (Snakemake, its jobs):
    PYTHONPATH ``copy_root``, then the repository root (which ``python -m pytest`` would
    have put first: some tests import ``tests.…``, and Snakemake, finding the Snakefile's
    folder on ``sys.path`` already, does not put it first either); PYTHONSAFEPATH, so no
    ``python -m …`` or ``python -c …`` started in the repository puts it first; no byte code
    written into the repository; none of an outer pytest's options (the smoke test runs this
    script from inside pytest)."""
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("PYTEST_ADDOPTS", "PYTEST_XDIST", "PYTEST_CURRENT"))
    }
    paths = [str(copy_root), str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    environment["PYTHONPATH"] = os.pathsep.join(paths)
    environment["PYTHONSAFEPATH"] = "1"
    environment["PYTHONDONTWRITEBYTECODE"] = "1"
    return environment


def run_limited(command: list[str], environment: dict[str, str], limit: float) -> Run:
    """Run ``command`` from the repository root in a session of its own; past ``limit``
    seconds the whole session (Snakemake's children too) is killed."""
    started = time.perf_counter()
    process = subprocess.Popen(
        command,
        cwd=REPO,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=limit)
        returncode: int | None = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        returncode = None
    return Run(returncode, time.perf_counter() - started, output)


def python_command(*arguments: str) -> list[str]:
    """This interpreter with ``-P``: the working directory (the repository root, which holds
    the unmutated ``layerlaws/``) is not put first on ``sys.path``."""
    return [sys.executable, "-P", *arguments]


def pytest_command(tests: tuple[str, ...], marker: str, basetemp: Path) -> list[str]:
    """The pytest run of ``tests`` selected by the marker expression ``marker``, stopping at
    the first failure; its temporary folders go under ``basetemp`` (inside the copy's
    folder)."""
    return python_command(*PYTEST, "-x", "-m", marker, f"--basetemp={basetemp}", *tests)


def module_name(file: str) -> str:
    """``equilearning/law.py`` → ``layerlaws.equilearning.law``."""
    return ".".join([PACKAGE, *Path(file).with_suffix("").parts])


def check_resolution(copy_root: Path, modules: list[str]) -> None:
    """Each of ``modules`` imports from the copy in ``copy_root`` in a plain ``python -c``
    started from the repository root (as the tests start their subprocesses), under the
    environment of the runs; a MutationError otherwise."""
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n"
    code += "    print(importlib.import_module(name).__file__)\n"
    run = run_limited(
        [sys.executable, "-c", code, *modules], child_environment(copy_root), CHECK_LIMIT
    )
    files = run.output.split()
    inside = run.returncode == 0 and len(files) == len(modules)
    if not inside or not all(Path(f).is_relative_to(copy_root) for f in files):
        raise MutationError(
            f"{', '.join(modules)} did not import from the copy in {copy_root}:\n{run.output}"
        )


CANARY_TEST = """
import layerlaws


def test_layerlaws_is_the_copy():
    assert layerlaws.__file__.startswith({root!r}), layerlaws.__file__
"""


def check_pytest_resolution(copy_root: Path) -> Path:
    """pytest, started as the runs start it, imports ``layerlaws`` from the copy: a test
    written into ``copy_root`` says so. Returns the file ``layerlaws`` came from."""
    canary = copy_root / "test_canary.py"
    canary.write_text(CANARY_TEST.format(root=str(copy_root)))
    run = run_limited(
        python_command(
            *PYTEST, f"--rootdir={REPO}", f"--basetemp={copy_root / 'basetemp'}", str(canary)
        ),
        child_environment(copy_root),
        CHECK_LIMIT,
    )
    canary.unlink()
    if run.returncode != 0:
        raise MutationError(f"pytest did not import layerlaws from {copy_root}:\n{run.output}")
    return copy_root / PACKAGE / "__init__.py"


def sanity_check() -> None:
    """Before the loop: an unmutated copy is what both ``python -c`` and pytest import."""
    with tempfile.TemporaryDirectory(prefix="layerlaws-mutation-") as folder:
        root = copy_package(Path(folder).resolve(), None)
        check_resolution(root, [PACKAGE])
        print(f"sanity: layerlaws imports from the copy, {check_pytest_resolution(root)}")


def failed_test(output: str) -> str:
    """The node id of the failed test in a pytest output, or its last line."""
    found = FAILED_TEST.search(output)
    if found:
        return found.group(1)
    lines = output.strip().splitlines()
    return lines[-1] if lines else "no output"


def judged(
    mutation: Mutation, level: str, run: Run, seconds: float, limit: float
) -> Outcome | None:
    """The outcome of a run of ``level`` tests (stopped after ``limit`` seconds), or None
    when they passed (or none were selected) and the mutation survived them."""
    if run.returncode is None:
        return Outcome(mutation, "TIMEOUT", level, seconds, f"past {limit:g} s, not a kill")
    if run.returncode in (0, 5):
        return None
    broken = BROKEN_OUTPUT.search(run.output)
    if run.returncode != 1 or broken:
        why = broken.group(1) if broken else f"pytest exit status {run.returncode}"
        return Outcome(mutation, "BROKEN", level, seconds, f"{why}: {failed_test(run.output)}")
    return Outcome(mutation, "killed", level, seconds, failed_test(run.output))


def run_mutation(mutation: Mutation, limit: float) -> Outcome:
    """Apply ``mutation`` to a temporary copy of the package and run its tests, each run
    for ``limit`` seconds at most: unit-level ones first, slow ones only if it survived
    those."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"layerlaws-{mutation.name}-") as folder:
        root = copy_package(Path(folder).resolve(), mutation)
        check_resolution(root, [module_name(mutation.file)])
        environment = child_environment(root)
        for level, marker in (("unit", UNIT), ("slow", SLOW)):
            command = pytest_command(mutation.tests, marker, root / "basetemp")
            run = run_limited(command, environment, limit)
            if run.returncode not in (0, 5, None) and BROKEN_OUTPUT.search(run.output):
                print(run.output[-3000:], file=sys.stderr)
            outcome = judged(mutation, level, run, time.perf_counter() - started, limit)
            if outcome is not None:
                return outcome
    return Outcome(mutation, "SURVIVED", "slow", time.perf_counter() - started, "every test passed")


def run_baseline(mutations: tuple[Mutation, ...], limit: float) -> None:
    """The selected mutations' tests pass on an unmutated copy (each of the two runs within
    ``limit`` seconds); a MutationError naming the failure otherwise."""
    tests = tuple(dict.fromkeys(test for mutation in mutations for test in mutation.tests))
    with tempfile.TemporaryDirectory(prefix="layerlaws-baseline-") as folder:
        root = copy_package(Path(folder).resolve(), None)
        for marker in (UNIT, SLOW):
            command = pytest_command(tests, marker, root / "basetemp")
            run = run_limited(command, child_environment(root), limit)
            if run.returncode not in (0, 5):
                raise MutationError(
                    f"baseline ({marker}) failed on the unmutated library:\n{run.output[-3000:]}"
                )
            print(f"baseline: the {marker!r} tests pass unmutated ({run.seconds:.1f} s)")


def report_line(outcome: Outcome) -> str:
    """One line: status, name, the level of the tests that decided, the test (or why),
    seconds."""
    level = outcome.level if outcome.status != "SURVIVED" else "-"
    return (
        f"{outcome.status:<9} {outcome.mutation.name:<30} {level:<4}  "
        f"({outcome.detail}, {outcome.seconds:.1f} s)"
    )


def library_digests() -> dict[str, str]:
    """sha256 of each file of the repository's ``layerlaws/``, by name: compared at the end
    to show that nothing there was written to."""
    return {
        path.relative_to(REPO).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted((REPO / PACKAGE).rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


def changed_files(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """The files added, removed or changed between two ``library_digests``."""
    return sorted(
        name for name in before.keys() | after.keys() if before.get(name) != after.get(name)
    )


def selected(names: list[str] | None) -> tuple[Mutation, ...]:
    """The mutations named (all when None), in ``MUTATIONS`` order; unknown names stop."""
    if names is None:
        return MUTATIONS
    known = {mutation.name for mutation in MUTATIONS}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise MutationError(f"unknown mutations {unknown}; --list gives the names")
    return tuple(mutation for mutation in MUTATIONS if mutation.name in names)


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run these mutations only")
    parser.add_argument("--list", action="store_true", help="print the mutations' names")
    parser.add_argument(
        "--baseline", action="store_true", help="first check the tests pass unmutated"
    )
    parser.add_argument(
        "--time-limit", type=float, default=TIME_LIMIT, help="seconds per pytest run"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the mutations asked for; the last line printed is the score."""
    options = arguments(argv)
    check_snippets(MUTATIONS)
    if options.list:
        for mutation in MUTATIONS:
            print(f"{mutation.name:<30} {PACKAGE}/{mutation.file}: {mutation.what}")
        return 0
    mutations = selected(options.only)
    started, library = time.perf_counter(), library_digests()
    sanity_check()
    if options.baseline:
        run_baseline(mutations, 4 * options.time_limit)
    outcomes = []
    for mutation in mutations:
        outcomes.append(run_mutation(mutation, options.time_limit))
        print(report_line(outcomes[-1]), flush=True)
    changed = changed_files(library, library_digests())
    if changed:  # never by this script, which writes to its copies only: by someone else
        print(f"warning: changed in the repository during the run: {', '.join(changed)}")
    killed = sum(outcome.killed for outcome in outcomes)
    by_unit = sum(outcome.killed and outcome.level == "unit" for outcome in outcomes)
    print(f"killed by unit-level tests: {by_unit}/{len(outcomes)}")
    print(
        f"mutations_killed={killed}/{len(outcomes)} seconds={round(time.perf_counter() - started)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
