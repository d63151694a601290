"""The model jobs of the equi-learning stage, as the workflow schedules them: the pass
(``equilearning_pass``), its shards (``equilearning_pass_shard``, with
``equilearning.shards`` above 1) and the kept hidden states (``extract_hidden``, with
``hidden_states.keep``). Their needs apply ``layerlaws.equilearning.costs`` and
``layerlaws.forward.costs`` to a run; ``planner`` is the workflow's ``JobPlanner``
(``layerlaws.pipeline.planning``), which sizes models and counts tokens."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from layerlaws.core.dtypes import DTYPE_BYTES
from layerlaws.core.model_jobs import ModelJob, plan_row
from layerlaws.equilearning.costs import equilearning_pass_needs
from layerlaws.equilearning.settings import observer_specs
from layerlaws.forward.costs import ModelSize, Needs, hidden_states_bytes, model_pass_needs
from layerlaws.forward.kept_states import storage_dtype
from layerlaws.forward.settings import regressed_stack
from layerlaws.models.quantization import stage_quantization


def repeated_tokens(path: str | Path) -> int:
    """Token ids occurring at least twice among the text tokens of a tokens table: at
    least as many as the targets of two rows or more of any offset (targets are text
    tokens)."""
    import polars as pl

    counts = pl.scan_parquet(path).filter(~pl.col("is_special")).group_by("token_id").len()
    return int(counts.filter(pl.col("len") >= 2).select(pl.len()).collect().item())


def open_classes(planner: Any, size: ModelSize, tokens: int, tokens_path: str | Path) -> int:
    """Classes the separation fuzziness may hold sums of at most (those of two rows or
    more): ``max_classes`` under ``classes: frequent``; under ``all`` the ids repeated among
    the text tokens of the run's tokens table once it exists, before it
    min(tokens // 2, vocabulary)."""
    settings = planner.config["equilearning"]["fuzziness"]
    if settings["classes"] == "frequent":
        return settings["max_classes"]
    if Path(tokens_path).is_file():
        return min(repeated_tokens(tokens_path), size.vocab_size)
    return min(tokens // 2, size.vocab_size)


def pass_needs(
    planner: Any,
    model: str,
    size: ModelSize,
    tokens: int,
    longest: int,
    *,
    tokens_path: str | Path,
) -> Needs:
    """Needs of an equi-learning pass over ``tokens`` (those of ``tokens_path`` once it
    exists), or of one of its shards' jobs (a share of the tokens each, writing its
    statistics): of an encoder–decoder, the part of it the pass runs and the layers it
    regresses (``ModelSize.running``: under ``equilearning.encoder_decoder: one_stack`` the
    encoder alone under next-token probing, the decoder's layers of the whole model under
    span corruption); with what its named observers declare (``equilearning.observers``)
    for texts of ``longest`` tokens; the fuzziness's open class sums in host memory up to
    ``execution.fuzziness_host_gb``, the rest on the scratch disk."""
    settings = planner.config["equilearning"]
    sharding = planner.expanded.equilearning_sharding
    entry = planner.model(model)
    return equilearning_pass_needs(
        named=observer_specs(settings, model),
        tokens_per_text=longest,
        size=size.running(regressed_stack(entry.get("probe", "auto"), settings["encoder_decoder"])),
        dtype=entry["dtype"],
        n_tokens=sharding.share(tokens),
        batch_tokens=planner.batch_tokens(longest),
        offsets=settings["offsets"],
        norms=settings["norms"],
        controls=settings["controls"],
        on_gpu=planner.on_gpu(),
        gpus=entry["gpus"],
        gpu_memory_gb=planner.execution.gpu_memory_gb,
        fuzziness_open_classes=open_classes(planner, size, tokens, tokens_path),
        fuzziness_host_bytes=int(planner.execution.fuzziness_host_gb * 2**30),
        statistics_written=sharding.split,
        quantization=stage_quantization(entry, "passes"),
    )


def hidden_needs(planner: Any, model: str, size: ModelSize, tokens: int, longest: int) -> Needs:
    """Needs of ``extract_hidden``: a model pass over ``tokens`` that writes every layer's
    states in ``hidden_states.dtype``."""
    entry = planner.model(model)
    stored = storage_dtype(entry["dtype"], planner.expanded.hidden_states["dtype"])
    return model_pass_needs(
        size=size,
        dtype=entry["dtype"],
        n_tokens=tokens,
        batch_tokens=planner.batch_tokens(longest),
        on_gpu=planner.on_gpu(),
        gpus=entry["gpus"],
        gpu_memory_gb=planner.execution.gpu_memory_gb,
        output_bytes=hidden_states_bytes(size, tokens, DTYPE_BYTES[stored]),
        quantization=stage_quantization(entry, "passes"),
    )


def _shard_needs(planner: Any, wildcards: Any, input: Any) -> Needs:
    return planner.run_needs(
        wildcards, input, partial(pass_needs, planner, tokens_path=input.tokens)
    )


def _pass_job_needs(planner: Any, wildcards: Any, input: Any) -> Needs:
    """The whole pass, or (with shards) the merge of its shards on the CPU: the merged
    statistics, one shard's read and one restored in host memory."""
    needs = _shard_needs(planner, wildcards, input)
    if not planner.expanded.equilearning_sharding.split:
        return needs
    return planner.merge_needs(3 * needs.outputs_mb, needs.outputs_mb)


def _hidden_job_needs(planner: Any, wildcards: Any, input: Any) -> Needs:
    return planner.run_needs(wildcards, input, partial(hidden_needs, planner))


FEWER_TOKENS = "fewer tokens (datasets.{data}.n_samples or token_budget)"
MODEL_JOBS = (
    ModelJob("equilearning_pass", _pass_job_needs, FEWER_TOKENS),
    ModelJob(
        "equilearning_pass_shard", _shard_needs, FEWER_TOKENS + " or more equilearning.shards"
    ),
    ModelJob("extract_hidden", _hidden_job_needs, FEWER_TOKENS),
)
"""The stage's model-running rules."""


def planned_jobs(planner: Any) -> list[dict[str, Any]]:
    """The plan's rows of every equi-learning run: its pass (or the pass's shards) and,
    with ``hidden_states.keep``, its kept hidden states."""
    rows = []
    sharding = planner.expanded.equilearning_sharding
    for model, dataset in planner.expanded.runs:
        sized = planner.size(model)
        tokens, longest, counted = planner.tokens(model, dataset)
        tokens_path = planner.layout.tokens(model, dataset)
        needs = pass_needs(planner, model, sized[0], tokens, longest, tokens_path=tokens_path)
        share = sharding.share(tokens)
        jobs = [
            (rule, data, shard, share, needs)
            for rule, data, shard in sharding.jobs("equilearning_pass", dataset)
        ]
        if planner.expanded.hidden_states["keep"]:
            hidden = hidden_needs(planner, model, sized[0], tokens, longest)
            jobs.append(("extract_hidden", dataset, {}, tokens, hidden))
        for rule, data, shard, job_tokens, job_needs in jobs:
            cache = hidden_states_bytes(sized[0], job_tokens, 4)
            rows.append(
                plan_row(
                    rule,
                    model,
                    data,
                    sized,
                    job_tokens,
                    counted,
                    job_needs,
                    wildcards={"model": model, "dataset": dataset, **shard},
                    cache_bytes_float32=cache,
                )
            )
    return rows
