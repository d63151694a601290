"""A coupling job: a model's prompt set, or one shard of it, measured under its trained
and random weights on the devices it claims (``measure_coupling`` and
``measure_coupling_shard``), and the shards merged.

A set split into ``coupling.shards`` shards runs as that many jobs, each with
its own device claim and progress saves, over every N-th prompt (``layerlaws.core.shards``);
each writes its prompts' files into one archive (``write_shard``), and the set's job writes
from the archives, a prompt at a time (``ShardArchives``), the tables one job writes (each
prompt's numbers depend on nothing but that prompt: every randomised SVD starts from
``svd_seed`` anew, and ``svd: auto`` decides for the set's longest prompt in every shard).
"""

from __future__ import annotations

import logging
import pickle
import zipfile
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import polars as pl
import torch

from layerlaws.core.atomic import atomic_path, write_csv
from layerlaws.core.errors import LayerlawsError
from layerlaws.core.progress import ProgressSaves, job_saves
from layerlaws.core.shards import ShardedJob
from layerlaws.coupling.kept import kept_prompts
from layerlaws.coupling.measurement import PromptMeasurement, TokenCoupling, require_ks_within
from layerlaws.coupling.prompt_set import (
    PromptFiles,
    measure_prompts,
    prompt_folder,
    write_outputs,
)
from layerlaws.coupling.settings import CouplingSettings
from layerlaws.coupling.subset import jacobian_indices
from layerlaws.models.architectures import require_single_stack
from layerlaws.models.devices import DeviceRequest
from layerlaws.models.facts import read_facts
from layerlaws.models.loading import (
    coupling_twins,
    load_tokenizer,
    logged_claim,
    plan_placement,
)
from layerlaws.text.corpus import prompt_sources
from layerlaws.text.tokens import tokenize_prompts

log = logging.getLogger("layerlaws")


def job_prompts(
    model: str | Path, prompt_set: Mapping[str, Any], sentences: Sequence[str | Path]
) -> tuple[list[list[int]], list[list[str]], list[str | None]]:
    """The token ids of every prompt of ``prompt_set`` for the prepared ``model``, each
    one's token texts and the dataset it comes from (None: one of the set's own texts); a
    LayerlawsError, first thing in a coupling job, for an encoder–decoder."""
    facts = read_facts(model)
    require_single_stack(
        facts.model_type,
        f"coupling (Jacobians of blocks along one residual stream) of {model}",
        "measure it in equi-learning runs only (remove it from coupling.runs, and give "
        "its series no prompts)",
    )
    samples = [pl.read_parquet(path) for path in sentences]
    tokenizer = load_tokenizer(model)
    texts, datasets = zip(*prompt_sources(prompt_set, samples), strict=True)
    prompts, kept = tokenize_prompts(
        list(texts),
        tokenizer,
        prompt_set["max_tokens"],
        prompt_set["too_long"],
        facts.max_positions,
    )
    labels = [tokenizer.convert_ids_to_tokens(ids) for ids in prompts]
    return prompts, labels, [datasets[index] for index in kept]


def prompt_table(
    prompts: Sequence[Sequence[int]],
    datasets: Sequence[str | None],
    jacobian_indices: Collection[int] | None,
) -> pl.DataFrame:
    """One row per prompt of a set (``prompts.csv``): ``prompt`` (its index in the other
    tables), ``dataset`` (the dataset it comes from; null for the set's own texts),
    ``tokens`` (its length, special tokens included) and ``jacobians`` (whether its
    Jacobians' coupling is measured, ``jacobian_indices``; None: every prompt's)."""
    return pl.DataFrame(
        {
            "prompt": list(range(len(prompts))),
            "dataset": list(datasets),
            "tokens": [len(ids) for ids in prompts],
            "jacobians": [
                jacobian_indices is None or index in jacobian_indices
                for index in range(len(prompts))
            ],
        },
        schema={
            "prompt": pl.Int64,
            "dataset": pl.String,
            "tokens": pl.Int64,
            "jacobians": pl.Boolean,
        },
    )


def measure_job(
    model: str | Path,
    initial: str | Path | None,
    prompts: Sequence[Sequence[int]],
    indices: Sequence[int],
    *,
    settings: CouplingSettings,
    dtype: str,
    quantization: str,
    jacobian_indices: Collection[int] | None,
    kept: Collection[int],
    devices: DeviceRequest,
    vjp_chunk: int,
    saves: ProgressSaves,
) -> PromptFiles:
    """The prompts of ``indices`` measured under the prepared ``model``'s weights and its
    random twin (the step-0 weights ``initial`` of a training checkpoint), in ``dtype``
    under ``quantization``, on the devices the job claims, ``vjp_chunk`` products at a
    time, the Jacobians of those of ``jacobian_indices`` only (None: of every one), the
    arrays of those of ``kept`` only; their files beside the job's progress save
    (``prompt_folder``)."""
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
            folder=prompt_folder(saves),
            saves=saves,
            jacobian_indices=jacobian_indices,
            kept=kept,
        )


def write_shard(path: str | Path, files: PromptFiles) -> None:
    """One shard's measured prompts, written atomically as one uncompressed zip archive
    whose member ``<weights>/<index>`` is the file of that prompt (``PromptFiles``), copied
    a block at a time."""
    with (
        atomic_path(path) as temporary,
        zipfile.ZipFile(temporary, "w", zipfile.ZIP_STORED, allowZip64=True) as archive,
    ):
        for weights, index in files.units:
            archive.write(files.path(weights, index), f"{weights}/{index}")


def _unreadable(path: str | Path, error: Exception) -> NoReturn:
    raise LayerlawsError(
        f"cannot read the coupling shard {path} ({error}); delete it and rerun: Snakemake "
        f"measures that shard again"
    ) from None


class ShardArchives:
    """The measured prompts of every shard of a set (``write_shard``'s archives at
    ``paths``), read a prompt at a time; checked to hold each of the set's ``count``
    prompts once under the same weights."""

    def __init__(self, paths: Sequence[str | Path], count: int) -> None:
        self.archive_of: dict[tuple[str, int], str | Path] = {}
        """The archive that holds each (weights, prompt index)."""
        members = 0
        for path in paths:
            try:
                with zipfile.ZipFile(path) as archive:
                    names = archive.namelist()
                units = [(weights, int(index)) for weights, index in map(_unit_of, names)]
            except (OSError, ValueError, zipfile.BadZipFile) as error:
                _unreadable(path, error)
            members += len(units)
            self.archive_of |= dict.fromkeys(units, path)
        weights = list(dict.fromkeys(name for name, _ in self.archive_of))
        self.units = [(name, index) for name in weights for index in range(count)]
        if members != len(self.units) or set(self.archive_of) != set(self.units):
            raise LayerlawsError(
                f"the coupling shards {', '.join(map(str, paths))} hold {members} prompt "
                f"measurements, not the {len(self.units)} of {count} prompts × "
                f"{sorted(weights)}; delete them and rerun"
            )

    def read(self, weights: str, index: int) -> PromptMeasurement:
        path = self.archive_of[weights, index]
        try:
            with zipfile.ZipFile(path) as archive, archive.open(f"{weights}/{index}") as member:
                return pickle.load(member)
        except (OSError, pickle.UnpicklingError, EOFError, zipfile.BadZipFile) as error:
            _unreadable(path, error)


def _unit_of(name: str) -> tuple[str, str]:
    """(weights, prompt index) of an archive member ``<weights>/<index>``."""
    weights, _, index = name.rpartition("/")
    return weights, index


def run_coupling_job(job: Any, execution: Any) -> None:
    """Run the job ``job`` of ``measure_coupling`` or ``measure_coupling_shard`` (a Snakemake
    script's ``snakemake`` object: its input, output, params, wildcards, threads and
    resources) under the config's ``execution`` settings
    (``layerlaws.pipeline.execution.Execution``): measure its prompts (every prompt, a
    shard's, or the shards' archives merged), then write a shard's archive or the tables
    and remove what was kept to resume."""
    params, output = job.params, job.output
    settings = CouplingSettings.from_params(params)
    model, initial = job.input.model, job.input.initial
    prompts, labels, datasets = job_prompts(model, params.prompts, job.input.sentences)
    jacobians = jacobian_indices(params.prompts, datasets)
    kept = kept_prompts(settings.keep_arrays, len(prompts), jacobians)

    def measure(indices: Sequence[int], saves: ProgressSaves) -> PromptFiles:
        torch.set_num_threads(job.threads)
        return measure_job(
            model,
            initial[0] if initial else None,
            prompts,
            indices,
            settings=settings,
            dtype=params.dtype,
            quantization=params.quantization,
            jacobian_indices=jacobians,
            kept=kept,
            devices=execution.device_request(job.resources.gpu),
            vjp_chunk=execution.vjp_chunk,
            saves=saves,
        )

    def write_all(measured: PromptFiles, _saves: ProgressSaves | None) -> None:
        token_coupling = TokenCoupling.of(settings, read_facts(model).num_layers)
        write_outputs(measured, labels, token_coupling, settings, output, kept)
        write_csv(output.prompts, prompt_table(prompts, datasets, jacobians))

    ShardedJob.of(params.get("shards", 1), job.wildcards, job.input).run(
        len(prompts),
        saves=lambda: job_saves(
            output[0],
            [model, *job.input.sentences, *initial],
            dict(params.items()),
            execution.checkpoint_minutes,
        ),
        measure=measure,
        merge=lambda files: ShardArchives(files, len(prompts)),
        write_shard=lambda measured: write_shard(output[0], measured),
        write_outputs=write_all,
        written=lambda measured: measured.remove(),
    )
