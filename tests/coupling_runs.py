"""The coupling measurement of a test model and its random twin, as a job runs it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from layerlaws.core.progress import ProgressSaves
from layerlaws.coupling import prompt_set
from layerlaws.coupling.measurement import TokenCoupling
from layerlaws.coupling.settings import CouplingSettings
from layerlaws.models.loading import coupling_twins


def measure_prompts(
    folder: Path,
    prompts: list[list[int]],
    settings: CouplingSettings,
    dtype: str = "float32",
    token_coupling: TokenCoupling | None = None,
    saves: ProgressSaves | None = None,
    jacobian_prompts: int | None = None,
) -> tuple[Any, Any]:
    """(twins, the tables ``measure_prompts`` and ``combine`` give) of the model in
    ``folder`` and its random twin, loaded afresh in ``dtype`` on the CPU; each token
    labelled by its id, the token coupling of 4 layers unless given."""
    twins = coupling_twins(folder, None, dtype, "cpu", settings.init_seed)
    token_coupling = token_coupling or TokenCoupling.of(settings, 4)
    measured = prompt_set.measure_prompts(
        twins,
        prompts,
        range(len(prompts)),
        token_coupling=token_coupling,
        settings=settings,
        vjp_chunk=16,
        device="cpu",
        saves=saves,
        jacobian_prompts=jacobian_prompts,
    )
    labels = [[str(token) for token in prompt] for prompt in prompts]
    return twins, prompt_set.combine(measured, list(twins), labels, token_coupling, settings)
