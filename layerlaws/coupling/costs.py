"""What the coupling measurement of one prompt costs, and what a coupling job needs
(``coupling_needs``), from the config alone (no torch: the workflow plans jobs with it,
and ``coupling.svd: auto`` chooses its path with it).

The unit is a **block-token**: one token's backward pass through one block. A Jacobian
product (one VJP or JVP, ``layerlaws.coupling.operators``) costs
- T block-tokens through the whole sequence (``coupling.products: whole_sequence``, and the
  families that fall back to it);
- 1 block-token token-locally (``layerlaws.coupling.local``) for the depth kind and the
  ``self`` token kind, plus ``KEY_VALUE_SHARE`` per earlier token for a product pulled to
  the earlier tokens (the context kinds), through their key and value projections.
A formed Jacobian (``svd`` full or randomized) is d VJPs; its SVD is not counted. The
randomised SVD's settings are here so that the plan counts what the measurement does.

Host memory: a coupling job writes each prompt's measurement to a file as soon as it is
measured and the outputs from those files a prompt at a time
(``layerlaws.coupling.prompt_set``), so it holds one prompt's measurement
(``prompt_host_bytes``) and, for the whole job, the prompts' tokens and the depth means'
running sums (``set_host_bytes``); before its first prompt, the random twin, drawn one
block at a time in float32 on the host and sent to its device
(``layerlaws.models.random_twin``: ``twin_host_bytes``).

Disk: every prompt's table rows but the token-wise ones, and the raw arrays and token-wise
rows of the prompts ``coupling.keep_arrays`` keeps (``OutputPrompts``,
``layerlaws.coupling.kept``), in the outputs and, while the job runs, in its prompts' files.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from layerlaws.coupling.kept import planned_kept
from layerlaws.coupling.layers import layer_pairs
from layerlaws.forward.costs import (
    HOST_BASE_MB,
    MIB,
    ModelSize,
    Needs,
    model_pass_needs,
    weights_bytes,
)
from layerlaws.models.architectures import ARCHITECTURES
from layerlaws.text.corpus import prompt_count

OVERSAMPLING = 10
"""Columns beyond K of the randomised SVD's sketch (Halko et al.'s p)."""
POWER_STEPS = 4
"""Block Krylov steps of the randomised SVD (Halko et al.'s q)."""
KEY_VALUE_SHARE = 1 / 16
"""A context product's extra cost per earlier token, as a share of one token's pass
through the block: the key and value projections, 2·d·d_kv of a block's multiply-adds
per token (SmolLM2-135M: 0.06; Qwen2.5-1.5B: 0.02)."""
ROW_BYTES = 1024
"""Host memory of one table row of a prompt's measurement while it is measured and written:
a Python dict of its fields with their boxed values (about 300 bytes in CPython), the
copy tagged with its weights and prompt (about 280) and its share of the polars frame
that writes it (about 70) or of the pickle that files it (about 100); also of one running
sum of the depth means."""
ROW_DISK_BYTES = 64
"""Disk of one table row: a CSV line of about 45 bytes, and about as much in its
prompt's file."""
BLOCK_SPREAD = 2
"""The largest block's parameters as a multiple of the mean block's, at most: Jamba's
mixture-of-experts blocks hold about 1.8 times the mean (transformer blocks are alike)."""
TWIN_COPIES = 2
"""Copies of a unit of the random twin on the host while it is placed: its float32 weights,
then its cast (half as large in bfloat16) and the checks' temporaries."""
LAYER_ROW_DISK_BYTES = 112
"""Disk of one row of the trajectories' layers table, five float64 values written in full:
104 bytes a CSV line measured (``bench/coupling_outputs.py``)."""
TOKEN_BYTES = 256
"""Host memory of one token of the prompt set, held for the whole job: its id in the
job's lists and its text (a short Python string, for the trajectories table)."""
AUTO = "auto"
FORMED = "full"
MATRIX_FREE = "matrix_free"
TOKEN_LOCAL = "token_local"
WHOLE_SEQUENCE = "whole_sequence"
WHOLE_SEQUENCE_MODEL_TYPES = frozenset(
    family for family, row in ARCHITECTURES.items() if row.whole_sequence_products
)
"""Families (transformers' ``model_type``) whose blocks keep whole-sequence products under
``token_local``: the architecture table's ``whole_sequence_products`` column (the hybrids
planned so in every layer, their attention layers included)."""


def sketch_products(k: int) -> int:
    """Products of the randomised SVD's block Krylov sketch at K = ``k``: 2 l (q + 1),
    l = K + p columns, q steps (half VJPs, half JVPs)."""
    return 2 * (k + OVERSAMPLING) * (POWER_STEPS + 1)


def factor_products(k: int, width: int) -> int:
    """Products of the top-``k`` factors of one d × d Jacobian (d = ``width``): the
    sketch's, or d VJPs (Jᵀ whole, then its exact SVD) where d is no more than that."""
    return min(sketch_products(k), width)


def coupling_products(count: int, k: int, swapped: bool) -> int:
    """Products of the coupling matrices of one Jacobian with ``count`` factors at K = ``k``
    (twice as many when the swapped released metrics are measured)."""
    return count * k * (2 if swapped else 1)


@dataclass(frozen=True)
class PromptShape:
    """What the cost of one prompt's measurement depends on."""

    num_layers: int
    width: int
    length: int
    """T, the prompt's tokens."""
    k: int
    """The largest K."""
    metrics: Sequence[str]
    layer_pairs: Sequence[tuple[int, int]]
    """The token layer pairs (l, l′)."""

    def cost(self, svd: str, token_local: bool) -> float:
        """Block-tokens of the measurement under ``svd`` (``matrix_free``, or a formed
        path) with token-local or whole-sequence products. The context kinds are counted
        as at their defaults (t1 = 0, t2 = T − 1): every output token after the first
        has a context graph."""
        length, width, k = self.length, self.width, self.k
        local = 1.0 if token_local else float(length)
        tokens = range(length)

        def context(token: int) -> float:
            """A product pulled to token ``token``'s earlier tokens."""
            return 1 + KEY_VALUE_SHARE * token if token_local else float(length)

        if svd != MATRIX_FREE:
            depth = self.num_layers * width * local
            per_layer = sum(width * local + (width * context(t) if t else 0) for t in tokens)
            return depth + len({layer for pair in self.layer_pairs for layer in pair}) * per_layer
        swapped = any(metric.endswith("_swapped") for metric in self.metrics)
        own_values = any(metric.startswith("released_") for metric in self.metrics)
        factors, couplings = factor_products(k, width), coupling_products(1, k, swapped)
        depth = self.num_layers * local * (factors + self.num_layers * couplings)
        total = depth
        for layer_a, layer_b in self.layer_pairs:
            factored = 2 if layer_a != layer_b and own_values else 1
            per_jacobian = factored * factors + length * couplings
            total += per_jacobian * local * length  # self: J_tt
            total += sum(per_jacobian * context(t) for t in tokens)  # fixed_input: J_{0,t}
            total += sum(per_jacobian * context(length - 1) for _ in tokens)  # fixed_output
        return total

    def cheaper_svd(self, token_local: bool) -> str:
        """``matrix_free`` or ``full``, whichever costs fewer block-tokens
        (``coupling.svd: auto``)."""
        free = self.cost(MATRIX_FREE, token_local)
        return MATRIX_FREE if free < self.cost(FORMED, token_local) else FORMED


def trajectory_rows(size: ModelSize, length: int) -> int:
    """Table rows of the trajectories of one prompt of ``length`` tokens: T in
    trajectories, T (L + 1) in layers."""
    return length * (size.num_layers + 2)


def token_rows(size: ModelSize, length: int, settings: Mapping[str, Any]) -> int:
    """Token-wise table rows of one prompt of ``length`` tokens whose Jacobians are
    measured (``tokens.csv``): 3 T² per token layer pair (three kinds), each per K and
    metric; its statistics (``token_means.csv``) are T² times fewer."""
    pairs = len(layer_pairs(settings["token_layers"], size.num_layers))
    return 3 * length**2 * pairs * len(settings["ks"]) * len(settings["metrics"])


def prompt_rows(size: ModelSize, length: int, settings: Mapping[str, Any]) -> int:
    """Table rows of one prompt of ``length`` tokens whose Jacobians are measured: depth
    L² per K and metric; token-wise ``token_rows`` and their statistics; singular values
    L·K; its trajectories'."""
    layers = size.num_layers
    depth = layers**2 * len(settings["ks"]) * len(settings["metrics"])
    tokens = token_rows(size, length, settings)
    statistics = token_rows(size, 1, settings)
    return (
        depth + tokens + statistics + layers * max(settings["ks"]) + trajectory_rows(size, length)
    )


@dataclass(frozen=True)
class PromptArrays:
    """Bytes of one prompt's raw arrays under one weights, float32."""

    streams: int
    """Its residual streams (L + 1, T, d)."""
    factors: int
    """Its top-K factors U, V (L, d, K) and S (L, K)."""
    depth: int
    """The coupling matrices of the depth pairs at the smallest K (L, L, K, K)."""
    tokens: int
    """The coupling matrices of the first token layer pair (T, T, K, K)."""

    @classmethod
    def of(cls, size: ModelSize, length: int, settings: Mapping[str, Any]) -> PromptArrays:
        """The arrays of a prompt of ``length`` tokens."""
        layers, width = size.num_layers, size.hidden_size
        k, kept = max(settings["ks"]), min(settings["ks"])
        return cls(
            streams=4 * (layers + 1) * length * width,
            factors=4 * (2 * width + 1) * layers * k,
            depth=4 * layers**2 * kept**2,
            tokens=4 * length**2 * kept**2,
        )

    @property
    def total(self) -> int:
        return self.streams + self.factors + self.depth + self.tokens


def prompt_array_bytes(size: ModelSize, length: int, settings: Mapping[str, Any]) -> int:
    """The arrays of one prompt's measurement, float32 (``PromptArrays``)."""
    return PromptArrays.of(size, length, settings).total


def prompt_host_bytes(size: ModelSize, length: int, settings: Mapping[str, Any]) -> int:
    """Host memory of one prompt's measurement while it is measured, filed and written:
    its arrays and its table rows."""
    rows = prompt_rows(size, length, settings)
    return prompt_array_bytes(size, length, settings) + rows * ROW_BYTES


def set_host_bytes(size: ModelSize, prompts: int, length: int, settings: Mapping[str, Any]) -> int:
    """Host memory held for a whole job of a set of ``prompts`` prompts of up to
    ``length`` tokens (a shard's job too tokenises them all): their tokens, and the running
    sums of the depth means (two weights: L² per K and metric, and |A| (L, L, K, K)
    float64 at the smallest K)."""
    per_value = len(settings["ks"]) * len(settings["metrics"])
    kept = min(settings["ks"])
    means = 2 * (size.num_layers**2 * (per_value * ROW_BYTES + 8 * kept**2))
    return prompts * length * TOKEN_BYTES + means


@dataclass(frozen=True)
class OutputPrompts:
    """The prompts of a coupling job's outputs, or of a shard's share of them."""

    prompts: int
    jacobians: int
    """Those whose Jacobians are measured."""
    kept: int
    """Those whose residual streams are written (``coupling.keep_arrays``)."""
    kept_jacobians: int
    """Those with Jacobians whose factors, coupling matrices and token-wise rows are
    written."""

    @classmethod
    def of(cls, prompt_set: Mapping[str, Any], keep: int | str, shards: int = 1) -> OutputPrompts:
        """At most the prompts of ``prompt_set``'s outputs under ``keep``, or of one of its
        ``shards`` shards (a share of the prompts each, all the kept in the largest)."""
        total = prompt_count(prompt_set)
        jacobians = min(total, prompt_set["jacobian_prompts"] or total)
        kept = planned_kept(keep, prompt_set, total)
        count, jacobian_count = -(-total // shards), -(-jacobians // shards)
        return cls(count, jacobian_count, min(kept, count), min(kept, jacobian_count))


def coupling_output_bytes(
    size: ModelSize, prompts: OutputPrompts, length: int, settings: Mapping[str, Any]
) -> int:
    """Disk of the outputs of ``prompts`` of up to ``length`` tokens (two weights): every
    prompt's trajectory rows (its layers' at ``LAYER_ROW_DISK_BYTES``) and, of those with
    Jacobians, their coupling rows (``prompt_rows``) but the token-wise ones, which the
    kept prompts with Jacobians only have (``token_rows``); the kept prompts' streams and,
    of those with Jacobians, their factors and depth coupling matrices; one prompt's token
    coupling matrices and the mean |A| (``PromptArrays``)."""
    arrays = PromptArrays.of(size, length, settings)
    trajectories = trajectory_rows(size, length)
    tokens = token_rows(size, length, settings)
    jacobian_rows = prompt_rows(size, length, settings) - trajectories - tokens
    rows = (
        prompts.prompts * trajectories
        + prompts.jacobians * jacobian_rows
        + prompts.kept_jacobians * tokens
    )
    layer_rows = prompts.prompts * length * (size.num_layers + 1)
    kept = (
        prompts.kept * arrays.streams
        + prompts.kept_jacobians * (arrays.factors + arrays.depth)
        + arrays.tokens
        + arrays.depth
    )
    row_bytes = rows * ROW_DISK_BYTES + layer_rows * (LAYER_ROW_DISK_BYTES - ROW_DISK_BYTES)
    return 2 * (row_bytes + kept)


def prompt_file_bytes(
    size: ModelSize, prompts: OutputPrompts, length: int, settings: Mapping[str, Any]
) -> int:
    """Disk of the files of ``prompts`` while a job runs (``layerlaws.coupling.prompt_set``,
    two weights): what the outputs hold, and the depth coupling matrices of every prompt
    with Jacobians (the set's mean |A| is summed from them)."""
    unkept = prompts.jacobians - prompts.kept_jacobians
    depth = PromptArrays.of(size, length, settings).depth
    return coupling_output_bytes(size, prompts, length, settings) + 2 * unkept * depth


def twin_host_bytes(size: ModelSize) -> int:
    """Host memory of drawing the random twin (``layerlaws.models.random_twin``): one unit
    at a time in float32 — the largest block (the blocks' mean share of the parameters
    beside the input embeddings, times ``BLOCK_SPREAD``) or the embeddings (vocabulary ×
    width), whichever is larger — ``TWIN_COPIES`` times. Llama-3-70B: 13.9 GB, not the
    282 GB of its whole float32 twin."""
    embeddings = size.vocab_size * size.hidden_size
    block = max(0, size.parameters - embeddings) / size.num_layers * BLOCK_SPREAD
    return math.ceil(TWIN_COPIES * 4 * max(block, embeddings))


def coupling_needs(
    *,
    size: ModelSize,
    settings: Mapping[str, Any],
    prompt_set: Mapping[str, Any],
    shards: int,
    dtype: str,
    quantization: str,
    on_gpu: bool,
    gpus: int | str,
    gpu_memory_gb: float,
    step_zero: bool = False,
) -> Needs:
    """Needs of a coupling job (the config's ``coupling`` block ``settings``) on
    ``prompt_set``, or of one of its ``shards`` jobs (a share of the prompts each), whose
    random weights are a training's ``step_zero`` checkpoint or else drawn.

    Device: two copies of the model (trained and random) and the Jacobians of one prompt
    (of the first ``jacobian_prompts``): the last token's of every layer and three per
    token at each token layer, in block-tokens (``PromptShape``; a family of
    ``WHOLE_SEQUENCE_MODEL_TYPES`` with whole-sequence products, T times more; one not
    known yet, sized by its config entry alone, as token-local).

    Host, beyond what ``model_pass_needs`` counts: the larger of the random twin as it is
    made — drawn a block at a time (``twin_host_bytes``), else the step-0 weights loaded
    as the trained ones are, a shard at a time (counted with them) — and one prompt's
    measurement (``prompt_host_bytes``), plus what the whole job holds
    (``set_host_bytes``); on the CPU the twin's weights are the device's, counted with
    them.

    Disk: the prompts' files (``prompt_file_bytes``) and the outputs written from them
    (``coupling_output_bytes``), or a shard's archive of its files, under
    ``coupling.keep_arrays``."""
    length = prompt_set["max_tokens"]
    total = prompt_count(prompt_set)
    share = OutputPrompts.of(prompt_set, settings["keep_arrays"], shards)
    count, jacobian_count = share.prompts, share.jacobians
    pairs = layer_pairs(settings["token_layers"], size.num_layers)
    layers = len({layer for pair in pairs for layer in pair})
    shape = PromptShape(
        size.num_layers,
        size.hidden_size,
        length,
        max(settings["ks"]),
        settings["metrics"],
        pairs,
    )
    token_local = (
        settings["products"] == TOKEN_LOCAL and size.model_type not in WHOLE_SEQUENCE_MODEL_TYPES
    )
    svd = settings["svd"] if settings["svd"] != AUTO else shape.cheaper_svd(token_local)
    held = size.hidden_size if svd != MATRIX_FREE else max(settings["ks"]) * 2
    jacobians = (size.num_layers + 3 * length * layers) * size.hidden_size * held * 4
    twin = 0 if step_zero else twin_host_bytes(size)
    files = prompt_file_bytes(size, share, length, settings)
    outputs = coupling_output_bytes(size, share, length, settings)
    return model_pass_needs(
        size=size,
        dtype=dtype,
        # A block-token is 1/L of a token through the model; every prompt's trajectories
        # take a forward pass.
        n_tokens=jacobian_count * -(-int(shape.cost(svd, token_local)) // size.num_layers)
        + count * length,
        batch_tokens=length,
        on_gpu=on_gpu,
        gpus=gpus,
        gpu_memory_gb=gpu_memory_gb,
        device_bytes=weights_bytes(size, dtype, quantization) + jacobians,
        host_bytes=max(twin, prompt_host_bytes(size, length, settings))
        + set_host_bytes(size, total, length, settings),
        output_bytes=files + (files if shards > 1 else outputs),
        quantization=quantization,
    )


def coupling_merge_needs(
    *, size: ModelSize, settings: Mapping[str, Any], prompt_set: Mapping[str, Any]
) -> Needs:
    """Needs of the job that merges a prompt set's shards, on the CPU: one prompt's
    measurement and what the whole set holds in host memory (it reads the shards a prompt
    at a time), the outputs on disk (those ``coupling.keep_arrays`` keeps)."""
    length, total = prompt_set["max_tokens"], prompt_count(prompt_set)
    held = prompt_host_bytes(size, length, settings) + set_host_bytes(size, total, length, settings)
    prompts = OutputPrompts.of(prompt_set, settings["keep_arrays"])
    outputs = coupling_output_bytes(size, prompts, length, settings)
    return Needs(0, 0, HOST_BASE_MB + -(-held // MIB), max(1, -(-outputs // MIB)), 10)
