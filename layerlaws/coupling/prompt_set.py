"""A prompt set's coupling under several weights (``trained``, ``random``): every prompt
measured by ``layerlaws.coupling.measurement.measure_prompt`` and written to a file of its
own as soon as it is measured (``PromptFiles``), and the set's tables and arrays written
from those files one prompt at a time (``write_outputs``; Aubry et al., §3). A job's host
memory thus holds one prompt's measurement — its residual streams (L + 1, T, d), factors,
coupling matrices and table rows — whatever the number of prompts.

Only the prompts a job keeps (``coupling.keep_arrays``, ``layerlaws.coupling.kept``)
have their raw arrays and token-wise rows written, to their files and to the set's
outputs; every prompt has its other table rows and its token-wise statistics
(``token_means``), and its depth coupling matrices in its file for the set's mean |A|.

A prompt set given ``ProgressSaves`` (``layerlaws.core.progress``) keeps its prompts'
files beside the save (``<save>.prompts/``, ``prompt_folder``) and saves, between prompts
and at most every ``execution.checkpoint_minutes``, how many (weights, prompt) it has
measured, with a hash of those weights' names, prompt indices and token ids (the save holds
no measurement). A rerun with the same inputs skips them and ends with the outputs of an
uninterrupted run: every randomised SVD starts its generator from ``svd_seed`` anew, so a
prompt's numbers do not depend on the prompts measured before it.
"""

from __future__ import annotations

import logging
import pickle
import shutil
from collections.abc import Collection, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from layerlaws.core.atomic import atomic_path, csv_rows, npz_entries
from layerlaws.core.logs import ProgressLog
from layerlaws.core.progress import ProgressSaves, prefix_hash
from layerlaws.coupling.measurement import (
    COUPLING_KINDS,
    TRAJECTORY_KINDS,
    PromptMeasurement,
    TokenCoupling,
    measure_prompt,
)
from layerlaws.coupling.settings import CouplingSettings

log = logging.getLogger(__name__)

TABLES = ("depth", "singular_values", "tokens", "token_means", "trajectories", "layers")
"""The set's tables (CSV), each a rule output of this name:
- depth: weights, prompt (index or ``mean``), layer_a, layer_b, k, metric, miscoupling (the
  value of that coupling metric, ``layerlaws.coupling.miscoupling``); the ``mean`` rows
  average each (weights, layer_a, layer_b, k, metric) over the prompts measured;
- singular_values: weights, prompt, layer, rank (1..K), singular_value (of the last
  token's J^l);
- tokens: weights, prompt, layer_a, layer_b, kind, token_a, token_b, k, metric,
  miscoupling, of the prompts kept (``coupling.keep_arrays``);
- token_means: weights, prompt, layer_a, layer_b, kind, k, metric, pairs, miscoupling:
  per prompt with Jacobians, the mean of its token-wise rows over its ``pairs`` pairs of
  distinct tokens (``layerlaws.coupling.token_means``);
- trajectories: weights, prompt, token, lss, expodistance, equidistance_cv, text;
- layers: weights, prompt, token, layer (0..L), norm, step_length, lss_window (NaN at 0),
  logit_entropy, next_token_loss (nats; NaN at the last token)."""
UNKEPT_TABLES = tuple(name for name in TABLES if name != "tokens")
"""The tables that hold the rows of every prompt, kept or not."""
ARRAYS = ("factors", "couplings", "streams")
"""The set's arrays (uncompressed ``.npz``), each a rule output of this name:
- factors: ``<weights>/<prompt>/{u,s,v}``, top-K factors of the last-token Jacobians;
- couplings: ``k``, K (the smallest of ``ks``); ``token_layers``, the first token layer
  pair (l, l′); ``depth/<weights>/<prompt>``, A of every depth pair (L, L, K, K), and
  ``depth/<weights>/mean_abs``, their mean |A| over every prompt with Jacobians;
  ``tokens/<weights>/<prompt>``, A of the ``self`` kind at that pair (T, T, K, K), of the
  first prompt whose Jacobians are measured. float32;
- streams: ``<weights>/<prompt>``, the raw residual stream (L + 1, T, d).
Each ``<prompt>`` is one of the prompts kept (``coupling.keep_arrays``)."""
SUFFIX = ".prompts"
"""Of a job's folder of measured prompts, beside its progress save."""


class Measured(Protocol):
    """Measured prompts, read one at a time."""

    units: Sequence[tuple[str, int]]
    """(weights, prompt index) of every prompt measured, weights in the order measured."""

    def read(self, weights: str, index: int) -> PromptMeasurement:
        """The measurement of prompt ``index`` under ``weights``."""
        ...


@dataclass(frozen=True)
class PromptFiles:
    """Prompts measured by a job, one file each in ``folder``: the pickled
    ``PromptMeasurement`` of prompt i under weights w in ``<w>-<i>.prompt``, written
    atomically as it is measured."""

    folder: Path
    units: tuple[tuple[str, int], ...]
    """(weights, prompt index) of every file, in the order measured."""

    def path(self, weights: str, index: int) -> Path:
        """The file of prompt ``index`` under ``weights``."""
        return self.folder / f"{weights}-{index}.prompt"

    def read(self, weights: str, index: int) -> PromptMeasurement:
        with open(self.path(weights, index), "rb") as handle:
            return pickle.load(handle)

    def remove(self) -> None:
        """Remove the folder (the set's outputs are written)."""
        shutil.rmtree(self.folder, ignore_errors=True)


def prompt_folder(saves: ProgressSaves) -> Path:
    """Where a job with ``saves`` keeps its measured prompts until its outputs are
    written: beside its progress save."""
    return saves.path.with_suffix(SUFFIX)


def _without_arrays(measurement: PromptMeasurement) -> PromptMeasurement:
    """A prompt's measurement as a job that does not keep its arrays files it: its table
    rows but the token-wise ones (their statistics kept), and its depth coupling matrices
    for the set's mean |A|."""
    return replace(measurement, factors={}, streams=None, token_couplings=None, tokens=[])


def _write_prompt(path: Path, measurement: PromptMeasurement) -> None:
    """One prompt's measurement, pickled atomically (protocol 5: arrays written from their
    buffers, without a copy)."""
    with atomic_path(path) as temporary, open(temporary, "wb") as handle:
        pickle.dump(measurement, handle, protocol=pickle.HIGHEST_PROTOCOL)


def measure_prompts(
    models: Mapping[str, Any],
    prompts: Sequence[Sequence[int]],
    indices: Sequence[int],
    *,
    token_coupling: TokenCoupling,
    settings: CouplingSettings,
    vjp_chunk: int,
    device: str,
    folder: str | Path,
    saves: ProgressSaves | None = None,
    jacobian_indices: Collection[int] | None = None,
    kept: Collection[int] | None = None,
) -> PromptFiles:
    """``measure_prompt`` for the prompts (token ids) of ``indices`` under every weights
    (e.g. ``trained`` and ``random``) on ``device``, each written to its file in ``folder``
    as soon as it is measured; ``svd: auto`` decides for the longest of all ``prompts``, so
    that every shard of a set decides alike. Only the prompts of ``jacobian_indices`` (all
    when None; ``layerlaws.coupling.subset``) have their Jacobians measured, the rest their
    trajectories; only those of ``kept`` (all when None) keep their arrays in their files
    (``_without_arrays``). With ``saves`` the prompts measured by an earlier run of the
    same inputs (its last save, their files in ``folder``) are kept, and how many are
    measured is saved after each prompt that leaves some to measure; otherwise ``folder``
    starts empty (the caller removes the folder and the save once its outputs are
    written)."""
    units = [
        (weights, index, [int(token) for token in prompts[index]])
        for weights in models
        for index in indices
    ]
    files = PromptFiles(Path(folder), tuple((weights, index) for weights, index, _ in units))
    longest = max(len(prompt) for prompt in prompts)
    done = _resumed(saves, units, files) if saves is not None else 0
    if not done:
        # What an earlier run of other inputs left, its save too: a later run of those
        # inputs must not resume onto the files this run writes.
        files.remove()
        if saves is not None:
            saves.path.unlink(missing_ok=True)
    report = ProgressLog("coupling", len(units), "prompts", done=done, every=60)
    for number, (weights, index, ids) in enumerate(units[done:], start=done + 1):
        measurement = measure_prompt(
            models[weights],
            torch.tensor([ids], device=device),
            token_coupling=token_coupling,
            settings=settings,
            vjp_chunk=vjp_chunk,
            svd_length=longest,
            kinds=(
                COUPLING_KINDS
                if jacobian_indices is None or index in jacobian_indices
                else TRAJECTORY_KINDS
            ),
        )
        if kept is not None and index not in kept:
            measurement = _without_arrays(measurement)
        _write_prompt(files.path(weights, index), measurement)
        del measurement  # not held while the next prompt is measured
        report.update(number, f"last: {weights} prompt {index}, {len(ids)} tokens")
        if saves is not None and number < len(units):
            state = {"units_hash": prefix_hash(units[:number]), "measured": number}
            saves.save_if_due(state, f"prompt {number} of {len(units)}")
    return files


def _resumed(
    saves: ProgressSaves, units: Sequence[tuple[str, int, list[int]]], files: PromptFiles
) -> int:
    """How many of the first ``units`` (weights, prompt index, token ids) the last save
    says were measured, their ``files`` in place; 0 when there is none, it holds other
    prompts or their files are gone (logged)."""
    state = saves.load()
    if state is None:
        return 0
    done = state["measured"]
    if not saves.prefix_matches(state["units_hash"], units, done, "measured prompts"):
        return 0
    missing = [unit for unit in units[:done] if not files.path(*unit[:2]).is_file()]
    if missing:
        log.warning(
            "discarding the progress save %s: %d of its %d measured prompts have no file in "
            "%s; starting from the beginning",
            saves.path,
            len(missing),
            done,
            files.folder,
        )
        return 0
    log.info("resuming the coupling after %d of %d prompts (weights × prompts)", done, len(units))
    return done


class _DepthMeans:
    """The depth rows' running sums over the prompts, per weights, layer pair, K and
    metric: the ``mean`` rows of depth.csv. Float64 sums with Kahan's compensation (the
    summation polars' group-by mean uses, so the means are those of the set's rows
    averaged in one table)."""

    def __init__(self) -> None:
        self.sums: dict[tuple[Any, ...], list[float]] = {}
        """(weights, layer_a, layer_b, k, metric): [sum, compensation, count]."""

    def add(self, weights: str, rows: Sequence[Mapping[str, Any]]) -> None:
        for row in rows:
            key = (weights, row["layer_a"], row["layer_b"], row["k"], row["metric"])
            total, compensation, count = self.sums.get(key, (0.0, 0.0, 0))
            term = row["miscoupling"] - compensation
            added = total + term
            self.sums[key] = [added, (added - total) - term, count + 1]

    def rows(self) -> list[dict[str, Any]]:
        return [
            {
                "weights": weights,
                "prompt": "mean",
                "layer_a": layer_a,
                "layer_b": layer_b,
                "k": k,
                "metric": metric,
                "miscoupling": total / count,
            }
            for (weights, layer_a, layer_b, k, metric), (total, _, count) in self.sums.items()
        ]


def _tagged(
    prompt: PromptMeasurement, table: str, weights: str, index: int, labels: Sequence[str]
) -> list[dict[str, Any]]:
    """The rows of ``prompt``'s ``table`` with its weights and prompt index first, and in
    the trajectories the text of each token (``labels``) last."""
    tag = {"weights": weights, "prompt": str(index)}
    if table == "trajectories":
        return [tag | row | {"text": labels[row["token"]]} for row in prompt.trajectories]
    return [tag | row for row in getattr(prompt, table)]


def write_outputs(
    measured: Measured,
    labels: Sequence[Sequence[str]],
    token_coupling: TokenCoupling,
    settings: CouplingSettings,
    output: Any,
    kept: Collection[int] | None = None,
) -> None:
    """The set's ``TABLES`` and ``ARRAYS`` from its ``measured`` prompts (one job's, or
    its shards'), each written atomically to the path ``output`` names after it (the rule's
    outputs), in the order of the weights measured and of ``labels`` (one per prompt: its
    tokens' texts), a prompt at a time: every table's rows and every array of a prompt are
    appended to the outputs before the next prompt is read, and the means over the prompts
    (depth ``mean`` rows, ``mean_abs``) are running float64 sums. The arrays and
    token-wise rows are those of the prompts of ``kept`` (all when None), the other tables
    and the means of every prompt."""
    weights_names = list(dict.fromkeys(weights for weights, _ in measured.units))
    with ExitStack() as stack:
        tables = {name: stack.enter_context(csv_rows(getattr(output, name))) for name in TABLES}
        arrays = {name: stack.enter_context(npz_entries(getattr(output, name))) for name in ARRAYS}
        couplings = arrays["couplings"]
        couplings.add("k", np.array(min(settings.ks)))
        couplings.add("token_layers", np.array(token_coupling.layer_pairs[0]))
        means = _DepthMeans()
        for weights in weights_names:
            absolute, count = np.zeros(()), 0
            for index in range(len(labels)):
                prompt = measured.read(weights, index)
                keeps = kept is None or index in kept
                for name in TABLES if keeps else UNKEPT_TABLES:
                    tables[name].add(_tagged(prompt, name, weights, index, labels[index]))
                if keeps:
                    for key, array in prompt.factors.items():
                        arrays["factors"].add(f"{weights}/{index}/{key}", array)
                    arrays["streams"].add(f"{weights}/{index}", prompt.streams)
                means.add(weights, prompt.depth)
                if prompt.depth_couplings is not None:
                    if keeps:
                        couplings.add(f"depth/{weights}/{index}", prompt.depth_couplings)
                    absolute = absolute + np.abs(prompt.depth_couplings).astype(np.float64)
                    count += 1
                    if count == 1:
                        couplings.add(f"tokens/{weights}/{index}", prompt.token_couplings)
                del prompt  # not held while the next prompt is read
            couplings.add(f"depth/{weights}/mean_abs", (absolute / count).astype(np.float32))
        tables["depth"].add(means.rows())
