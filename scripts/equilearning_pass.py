"""Snakemake entry point: one forward pass of a model over a dataset's tokens that streams
the equi-learning statistics and writes the PR table (results/equilearning/…/pr.csv)."""

import logging
import os
from dataclasses import asdict

import polars as pl
import torch

from layerlaws.core.atomic import write_csv, write_json, write_npz
from layerlaws.core.logs import run_logged
from layerlaws.core.progress import job_saves
from layerlaws.equilearning.evaluation import HeldOutEvaluation
from layerlaws.equilearning.fuzziness import SeparationFuzziness, counted_classes
from layerlaws.equilearning.settings import EquilearningSettings
from layerlaws.equilearning.statistics import (
    EquilearningStatistics,
    check_enough_rows,
    present_ids,
)
from layerlaws.equilearning.token_views import (
    TokenViews,
    ViewedRows,
    default_layers,
    word_token_ids,
)
from layerlaws.forward.masking import TARGET_OFFSETS, probe_of, probe_tokens
from layerlaws.forward.model_pass import run_forward_pass
from layerlaws.models.devices import claim_devices
from layerlaws.models.facts import read_facts
from layerlaws.models.loading import load_model, load_tokenizer, plan_placement
from layerlaws.pipeline.execution import Execution
from layerlaws.text.spans import token_spans, tokenizer_fingerprint


def main() -> None:
    log = logging.getLogger("layerlaws")
    execution, params = Execution.from_config(snakemake.config), snakemake.params
    settings = EquilearningSettings.from_params(params)
    facts = read_facts(snakemake.input.model)
    tokenizer = load_tokenizer(snakemake.input.model)
    probe = probe_of(params.probe, facts.model_type)
    tokens = probe_tokens(
        pl.read_parquet(snakemake.input.tokens),
        probe=probe,
        vocab_size=facts.vocab_size,
        mask_token_id=tokenizer.mask_token_id,
        masking=settings.masking,
        special_tokens=settings.special_tokens,
    )
    target_offset = TARGET_OFFSETS[probe]
    check_enough_rows(tokens, settings.offsets, facts.hidden_size)
    statistics = EquilearningStatistics(
        facts,
        settings.offsets,
        settings.norms,
        settings.controls,
        settings.shuffle_seed,
        present_ids(tokens, settings.offsets) if settings.shuffle == "present" else None,
    )
    # The head is evaluated on its own task only: not an encoder saved without its
    # masked-LM head, nor an encoder's head on next tokens (the table is one row of NaN).
    evaluated = facts.lm_head_trained and probe == probe_of("auto", facts.model_type)
    evaluation = HeldOutEvaluation(
        target_offset,
        token_spans(tokens, tokenizer) if evaluated else None,
        tokenizer_fingerprint(tokenizer),
    )
    if not evaluated:
        log.warning(
            "no held-out evaluation: %s has no trained head for %s targets",
            snakemake.input.model,
            probe,
        )
    classes = counted_classes(tokens, settings.fuzziness, target_offset)
    fuzziness = SeparationFuzziness(facts, settings.norms, classes, target_offset)
    views_settings = settings.token_views
    word_ids = word_token_ids(views_settings.groups, tokenizer)
    views = TokenViews(
        facts,
        ViewedRows.choose(tokens, word_ids, views_settings.max_rows),
        views_settings.layers or default_layers(facts.num_layers),
        views_settings.norm,
    )
    saves = job_saves(
        snakemake.output.pr,
        [snakemake.input.tokens, snakemake.input.model],
        dict(params.items()),
        execution.checkpoint_minutes,
    )
    torch.set_num_threads(snakemake.threads)
    gpus = max(1, snakemake.resources.gpu)
    with claim_devices(execution.device, execution.lock_dir, gpus) as claim:
        log.info(
            "running on %s (CUDA_VISIBLE_DEVICES=%r)",
            claim.describe(),
            os.environ.get("CUDA_VISIBLE_DEVICES"),
        )
        placement = plan_placement(snakemake.input.model, params.dtype, claim.devices)
        model = load_model(snakemake.input.model, params.dtype, placement)
        report = run_forward_pass(
            model,
            facts,
            tokens,
            [statistics, fuzziness, views],
            execution.batch_size,
            claim.device,
            logit_observers=[evaluation] if evaluated else [],
            saves=saves,
        )
    write_csv(snakemake.output.pr, statistics.table(settings.cutoff))
    held_out = evaluation.table()
    write_csv(snakemake.output.evaluation, held_out)
    write_csv(snakemake.output.fuzziness, fuzziness.table(settings.cutoff))
    write_csv(snakemake.output.token_views, views.table(views_settings.groups))
    write_npz(snakemake.output.token_states, views.arrays())
    write_json(
        snakemake.output.report, {**asdict(facts), **report, **saves.finish(), "probe": probe}
    )
    log.info(
        "%d rows × %d layers at %.0f tokens/s; held-out loss %.4f",
        report["n_rows"],
        facts.num_layers + 1,
        report["tokens_per_second"] or 0,
        held_out["loss"][0],
    )


run_logged(main, snakemake.log[0])
