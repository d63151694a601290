"""What the geometry tests share (their fixtures are in conftest.py): the settings they
measure with, a tiny model's pass with a ``Keeper`` of every layer's states, hand-made
states fed through ``Batch.of`` + ``begin_batch`` + ``observe``, the references' table
(``authors_reference``) and the comparison of tables."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl
import torch
from authors_reference import reference_rows

from layerlaws.forward.model_pass import Batch, TokenSequence, first_rows, run_forward_pass
from layerlaws.geometry.observer import QUANTITIES, GeometryObserver
from layerlaws.geometry.settings import GeometrySettings
from layerlaws.models.loading import load_model

PAPERS = GeometrySettings()
"""The papers' choices (the defaults): α = 1, normalised prompt states, |cos| curvature,
anisotropy over tokens of other texts, dataset entropy on the texts' means, CKA against
the last; each batch's cross-moments and prompt Gram matrices in float32."""
EXACT = GeometrySettings(product_dtype="float64")
"""The papers' choices with float64 products."""
OTHER = GeometrySettings(
    entropy_alpha=2.0,
    dataset_rows="tokens",
    prompt_states="raw",
    curvature_angle="signed",
    anisotropy_pairs="all",
    alpha_req_ranks=(2, 10),
    cka_against_last=False,
    product_dtype="float64",
)
"""Every other choice, measured in the same pass."""
TEXTS = 24


def model_in(tiny, dtype):
    return load_model(tiny[0], "float32", "cpu").to(dtype)


class Keeper:
    """Keeps every layer's states (float64) with each row's text."""

    progress_attributes = ()

    def __init__(self) -> None:
        self.states: dict[int, list[np.ndarray]] = {}
        self.texts: dict[int, list[np.ndarray]] = {}

    def begin_batch(self, batch) -> None:
        self.batch_texts = batch.rows["sentence_id"].to_numpy()

    def observe(self, layer, states) -> None:
        self.states.setdefault(layer, []).append(states.double().numpy().copy())
        self.texts.setdefault(layer, []).append(self.batch_texts)

    def rows(self, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """All rows of ``layer`` (n, d) and their texts (n,), in pass order (each text's
        rows in position order)."""
        return np.concatenate(self.states[layer]), np.concatenate(self.texts[layer])


def passed(tiny, dtype, settings=(PAPERS,), indices=None, batch_size=4):
    """Observers of ``settings``, a Keeper and the report after one pass over ``indices``."""
    _, facts, tokens = tiny
    observers = [GeometryObserver(choice, facts.num_layers) for choice in settings]
    keeper = Keeper()
    model = model_in(tiny, dtype)
    report = run_forward_pass(
        model,
        facts,
        tokens,
        [*observers, keeper],
        batch_size,
        "cpu",
        progress=False,
        sequence_indices=indices,
    )
    return observers, keeper, report


class HandMade:
    """Hand-made states of texts, for every layer: ``states[layer][text]`` (T_text, d)
    float64, the texts' lengths alike in every layer."""

    def __init__(self, states: Sequence[Sequence[np.ndarray]]) -> None:
        self.states = [list(layer) for layer in states]
        lengths = [len(text) for text in self.states[0]]
        self.sequences = [
            TokenSequence(
                text,
                np.arange(length),
                np.zeros(length, dtype=bool),
                np.arange(length),
                np.ones(length, dtype=bool),
            )
            for text, length in enumerate(lengths)
        ]

    @property
    def num_layers(self) -> int:
        return len(self.states) - 1

    def feed(self, observer: GeometryObserver, batches: Sequence[Sequence[int]]) -> None:
        """Show ``observer`` the texts of ``batches`` (lists of text numbers), every layer
        of a batch in order, as a pass does."""
        starts = first_rows(self.sequences)
        for texts in batches:
            observer.begin_batch(Batch.of(self.sequences, list(texts), starts))
            for layer, layer_states in enumerate(self.states):
                rows = np.concatenate([layer_states[text] for text in texts])
                observer.observe(layer, torch.from_numpy(rows))

    def observed(self, settings: GeometrySettings, batches=None) -> GeometryObserver:
        """A new observer of ``settings`` fed ``batches`` (all texts in one by default)."""
        observer = GeometryObserver(settings, self.num_layers)
        self.feed(observer, batches or [range(len(self.sequences))])
        return observer

    def rows(self, layer: int, texts: Sequence[int] | None = None):
        """The rows (n, d) of ``texts`` (all by default) of ``layer`` and their texts (n,)."""
        chosen = range(len(self.sequences)) if texts is None else texts
        x = np.concatenate([self.states[layer][text] for text in chosen])
        return x, np.repeat(list(chosen), [len(self.states[layer][text]) for text in chosen])


def reference(rows, settings: GeometrySettings, num_layers: int) -> pl.DataFrame:
    """The references' table (``authors_reference.reference_rows``) of ``rows(layer)``."""
    return pl.DataFrame(reference_rows(rows, settings, num_layers))


ARCCOS = 1e-9
"""The curvature's relative tolerance against float64 rounding: where consecutive
normalised steps are (nearly) parallel, |cos| ≈ 1 and arccos turns a rounding δ ≈ 1e-16 of
the cosine into √(2δ) ≈ 1e-8 of angle, about 1e-10 of a text's mean over a few dozen
angles."""


def assert_tables_close(
    found: pl.DataFrame, expected: pl.DataFrame, rtol: float | dict[str, float] = 1e-12
) -> None:
    """The same columns, every value of ``expected`` finite (but layer 0's cka_previous)
    and ``found`` within ``rtol`` of it (one for all, or by column, 1e-12 otherwise)."""
    assert found.columns == [
        c for c in ["layer", "n_rows", "n_texts", *QUANTITIES] if c in expected.columns
    ]
    assert found.columns == expected.columns
    for column in expected.columns:
        expected_values = expected[column].to_numpy()
        finite = np.isfinite(expected_values)
        assert finite[1:].all() and (finite[0] or column == "cka_previous"), column
        tolerance = rtol if isinstance(rtol, float) else rtol.get(column, 1e-12)
        np.testing.assert_allclose(
            found[column].to_numpy(), expected_values, atol=0, rtol=tolerance, err_msg=column
        )
