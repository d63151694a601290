"""A coupling job: a model's prompt set, or one shard of it, measured under its trained
and random weights on the devices it claims (``measure_coupling`` and
``measure_coupling_shard``), and the shards merged.

A set split into ``coupling.shards`` shards runs as that many jobs, each with
its own device claim and progress saves, over every N-th prompt (``layerlaws.core.shards``);
each writes its ``PromptMeasurement``s, and the set's job combines them into the tables
one job writes (each prompt's numbers depend on nothing but that prompt: every
randomised SVD starts from ``svd_seed`` anew, and ``svd: auto`` decides for the set's
longest prompt in every shard).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl
import torch

from layerlaws.core.atomic import atomic_path, write_csv, write_npz
from layerlaws.core.errors import LayerlawsError
from layerlaws.core.progress import ProgressSaves
from layerlaws.coupling.measurement import TokenCoupling, require_ks_within
from layerlaws.coupling.prompt_set import Measured, PromptSetMeasurement, measure_prompts
from layerlaws.coupling.settings import CouplingSettings
from layerlaws.models.architectures import require_single_stack
from layerlaws.models.devices import DeviceRequest
from layerlaws.models.facts import read_facts
from layerlaws.models.loading import (
    coupling_twins,
    load_tokenizer,
    logged_claim,
    plan_placement,
)
from layerlaws.text.corpus import prompt_texts
from layerlaws.text.tokens import tokenize_prompts

log = logging.getLogger("layerlaws")


def job_prompts(
    model: str | Path, prompt_set: Mapping[str, Any], sentences: Sequence[str | Path]
) -> tuple[list[list[int]], list[list[str]]]:
    """The token ids of every prompt of ``prompt_set`` for the prepared ``model``, and
    each one's token texts; a LayerlawsError, first thing in a coupling job, for an
    encoder–decoder."""
    facts = read_facts(model)
    require_single_stack(
        facts.model_type,
        f"coupling (Jacobians of blocks along one residual stream) of {model}",
        "measure it in equi-learning runs only (remove it from coupling.runs, and give "
        "its series no prompts)",
    )
    samples = [pl.read_parquet(path) for path in sentences]
    tokenizer = load_tokenizer(model)
    prompts = tokenize_prompts(
        prompt_texts(prompt_set, samples),
        tokenizer,
        prompt_set["max_tokens"],
        prompt_set["too_long"],
        facts.max_positions,
    )
    return prompts, [tokenizer.convert_ids_to_tokens(ids) for ids in prompts]


def measure_job(
    model: str | Path,
    initial: str | Path | None,
    prompts: Sequence[Sequence[int]],
    indices: Sequence[int],
    *,
    settings: CouplingSettings,
    dtype: str,
    quantization: str,
    jacobian_prompts: int | None,
    devices: DeviceRequest,
    vjp_chunk: int,
    saves: ProgressSaves,
) -> Measured:
    """The prompts of ``indices`` measured under the prepared ``model``'s weights and its
    random twin (the step-0 weights ``initial`` of a training checkpoint), in ``dtype``
    under ``quantization``, on the devices the job claims, ``vjp_chunk`` products at a
    time."""
    facts = read_facts(model)
    require_ks_within(settings, facts.hidden_size)
    token_coupling = TokenCoupling.of(settings, facts.num_layers)
    measured = f"{indices[0]}..{indices[-1]}" if indices else "none"
    context = (
        f"; prompts {measured} of {len(prompts)}, token layer pairs {token_coupling.layer_pairs}"
    )
    with logged_claim(devices, context) as claim:
        placement = plan_placement(model, dtype, claim.devices, quantization=quantization)
        twins = coupling_twins(model, initial, dtype, placement, settings.init_seed, quantization)
        return measure_prompts(
            twins,
            prompts,
            indices,
            token_coupling=token_coupling,
            settings=settings,
            vjp_chunk=vjp_chunk,
            device=claim.device,
            saves=saves,
            jacobian_prompts=jacobian_prompts,
        )


def write_shard(path: str | Path, measured: Measured) -> None:
    """One shard's measurements, written atomically."""
    with atomic_path(path) as temporary:
        torch.save(measured, temporary)


def read_shards(paths: Sequence[str | Path], count: int) -> Measured:
    """The measurements of every shard, checked to hold each of the set's ``count``
    prompts once under the same weights."""
    measured: Measured = {}
    for path in paths:
        try:
            measured |= torch.load(path, weights_only=False)
        except Exception as error:
            raise LayerlawsError(
                f"cannot read the coupling shard {path} ({error}); delete it and rerun: "
                f"Snakemake measures that shard again"
            ) from None
    weights = {name for name, _ in measured}
    expected = {(name, index) for name in weights for index in range(count)}
    if set(measured) != expected:
        raise LayerlawsError(
            f"the coupling shards {', '.join(map(str, paths))} hold {len(measured)} prompt "
            f"measurements, not the {len(expected)} of {count} prompts × {sorted(weights)}; "
            f"delete them and rerun"
        )
    return measured


def write_tables(output: Any, result: PromptSetMeasurement) -> None:
    """The set's tables and arrays, each written atomically to the rule's outputs."""
    for name in ("depth", "singular_values", "tokens", "trajectories", "layers"):
        write_csv(getattr(output, name), getattr(result, name))
    for name in ("factors", "couplings", "streams"):
        write_npz(getattr(output, name), getattr(result, name))
