"""The coupling measurement of a test model and its random twin, as a job runs it: the
prompts measured into their files, the set's outputs written from them and read back."""

from __future__ import annotations

import tempfile
from collections.abc import Collection, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import polars as pl

from layerlaws.core.progress import ProgressSaves
from layerlaws.coupling import prompt_set
from layerlaws.coupling.measurement import TokenCoupling
from layerlaws.coupling.settings import CouplingSettings
from layerlaws.models.loading import coupling_twins


def output_paths(folder: Path) -> SimpleNamespace:
    """Paths of the set's outputs in ``folder``, named as the rule names them."""
    tables = {name: folder / f"{name}.csv" for name in prompt_set.TABLES}
    return SimpleNamespace(**tables, **{name: folder / f"{name}.npz" for name in prompt_set.ARRAYS})


def read_outputs(paths: SimpleNamespace) -> SimpleNamespace:
    """The tables (polars, prompt and text as strings) and arrays (dicts, in the order
    written) at ``paths``."""
    text = {"prompt": pl.String, "text": pl.String}
    read = {
        name: pl.read_csv(getattr(paths, name), schema_overrides=text) for name in prompt_set.TABLES
    }
    for name in prompt_set.ARRAYS:
        with np.load(getattr(paths, name)) as archive:
            read[name] = dict(archive)
    return SimpleNamespace(**read)


def labels_of(prompts: list[list[int]]) -> list[list[str]]:
    """Each token labelled by its id."""
    return [[str(token) for token in prompt] for prompt in prompts]


def written(
    measured: prompt_set.Measured,
    prompts: list[list[int]],
    token_coupling: TokenCoupling,
    settings: CouplingSettings,
    kept: Collection[int] | None = None,
) -> SimpleNamespace:
    """The outputs ``write_outputs`` writes from ``measured``, the arrays of the prompts
    ``kept`` (all by default), read back."""
    with tempfile.TemporaryDirectory() as folder:
        paths = output_paths(Path(folder))
        prompt_set.write_outputs(
            measured, labels_of(prompts), token_coupling, settings, paths, kept
        )
        return read_outputs(paths)


def measured_files(
    twins: dict[str, Any],
    prompts: list[list[int]],
    folder: Path,
    *,
    settings: CouplingSettings,
    token_coupling: TokenCoupling,
    indices: Sequence[int] | None = None,
    saves: ProgressSaves | None = None,
    jacobian_indices: Sequence[int] | None = None,
    kept: Collection[int] | None = None,
) -> prompt_set.PromptFiles:
    """``measure_prompts`` of the prompts of ``indices`` (all by default) under ``twins``
    on the CPU, 16 products at a time, their files in ``folder``, the arrays of those
    ``kept`` (all by default)."""
    return prompt_set.measure_prompts(
        twins,
        prompts,
        range(len(prompts)) if indices is None else indices,
        token_coupling=token_coupling,
        settings=settings,
        vjp_chunk=16,
        device="cpu",
        folder=folder,
        saves=saves,
        jacobian_indices=jacobian_indices,
        kept=kept,
    )


def measure_prompts(
    folder: Path,
    prompts: list[list[int]],
    settings: CouplingSettings,
    dtype: str = "float32",
    token_coupling: TokenCoupling | None = None,
    saves: ProgressSaves | None = None,
    jacobian_indices: Sequence[int] | None = None,
) -> tuple[Any, Any]:
    """(twins, the outputs ``measure_prompts`` and ``write_outputs`` give, read back) of
    the model in ``folder`` and its random twin, loaded afresh in ``dtype`` on the CPU; the
    prompts' files beside ``saves`` (else in a temporary folder), the token coupling of 4
    layers unless given."""
    twins = coupling_twins(folder, None, dtype, "cpu", settings.init_seed)
    token_coupling = token_coupling or TokenCoupling.of(settings, 4)
    with tempfile.TemporaryDirectory() as scratch:
        measured = measured_files(
            twins,
            prompts,
            prompt_set.prompt_folder(saves) if saves else Path(scratch) / "prompts",
            settings=settings,
            token_coupling=token_coupling,
            saves=saves,
            jacobian_indices=jacobian_indices,
        )
        return twins, written(measured, prompts, token_coupling, settings)
