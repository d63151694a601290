"""Token-local Jacobian products (``coupling.products: token_local``) measure what the
whole-sequence ones measure: every table and coupling matrix of a prompt, for a tiny
random model of every family of the architecture table, equal within 1e-10 (relative to
each table's largest value) in float64 — the families that fall back to whole-sequence
products included (there trivially), and those whose attention transformers computes in
float32 (MPT's softmax, GPT-J's, GPT-Neo's and CodeGen's scores), which a float64 model
computes in float64 (``layerlaws.models.precision``).
The families that run only in float32 are left to ``tests/models/test_block_jacobians.py``,
which checks every family's Jacobians, both paths, against the whole model's autograd:
m̃ of a tiny random model's flat spectrum moves by up to 3e-3 under float32 rounding of
its Jacobians, so their tables could not tell a wrong product from rounding. And the
matrix-free path (JVPs as well as VJPs) on a Llama wide enough for the randomised SVD."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny_models import (
    ALL_FAMILIES,
    FLOAT32_FAMILIES,
    family_sizes,
    save_tiny_model,
    tiny_family_model,
)

from layerlaws.coupling.costs import TOKEN_LOCAL, WHOLE_SEQUENCE
from layerlaws.coupling.jacobians import jacobian_rows
from layerlaws.coupling.local import TokenLocalBlock
from layerlaws.coupling.measurement import PromptMeasurement, TokenCoupling, measure_prompt
from layerlaws.coupling.miscoupling import METRICS
from layerlaws.coupling.settings import CouplingSettings
from layerlaws.models.blocks import trace_blocks
from layerlaws.models.loading import load_model

pytestmark = pytest.mark.slow

PROMPT = [1, 5, 9, 14, 3]
TOKEN_COUPLING = TokenCoupling(((2, 2), (1, 3)), fixed_input_token=1, fixed_output_token=3)
"""Token kinds at two layer pairs, with the context kinds' fixed tokens inside the
prompt, so that both kinds of token-local graph (with and without the earlier tokens)
are built."""
FLOAT64_FAMILIES = [family for family in ALL_FAMILIES if family not in FLOAT32_FAMILIES]
HEAD_SIZE_PROMPT = [1, 5, 9, 14, 3, 7, 22, 6]
"""T = 8 tokens, the tiny models' head size."""
ROUNDING_EPS = 16
"""Largest distance of a token's re-run from the whole-sequence block's row, in ε of the
model's dtype, relative to the block's largest output. Measured on AVX2 and AVX-512 CPUs
at most 5 ε in float64 (every family), 7 ε in float32, 2 ε in bfloat16."""


def measured(model, ids: torch.Tensor, products: str, svd: str = "full") -> PromptMeasurement:
    settings = CouplingSettings(ks=(2, 4), metrics=METRICS, svd=svd, products=products)
    return measure_prompt(
        model, ids, token_coupling=TOKEN_COUPLING, settings=settings, vjp_chunk=16
    )


def assert_same_measurement(found: PromptMeasurement, expected: PromptMeasurement, rtol: float):
    """Every miscoupling, singular value and coupling matrix of ``found`` equals
    ``expected``'s within ``rtol`` of each one's largest value; none empty or NaN."""
    for table, column in (
        ("depth", "miscoupling"),
        ("tokens", "miscoupling"),
        ("singular_values", "singular_value"),
    ):
        values = np.array([row[column] for row in getattr(found, table)])
        reference = np.array([row[column] for row in getattr(expected, table)])
        assert reference.size > 0 and np.isfinite(reference).all(), table
        scale = np.abs(reference).max()
        np.testing.assert_allclose(values, reference, rtol=0, atol=rtol * scale, err_msg=table)
    for name in ("depth_couplings", "token_couplings"):
        reference = getattr(expected, name)
        assert reference.size > 0 and np.isfinite(reference).all(), name
        np.testing.assert_allclose(
            getattr(found, name), reference, rtol=0, atol=rtol * np.abs(reference).max()
        )


@pytest.mark.parametrize("family", FLOAT64_FAMILIES)
def test_token_local_products_measure_what_whole_sequence_ones_do(family, tokenizer, tmp_path):
    model = tiny_family_model(family, tokenizer, tmp_path)
    ids = torch.tensor([PROMPT])
    assert_same_measurement(
        measured(model, ids, TOKEN_LOCAL),
        measured(model, ids, WHOLE_SEQUENCE),
        rtol=1e-10,
    )


def test_matrix_free_token_local_products_measure_what_whole_sequence_ones_do(tmp_path, tokenizer):
    """d = 160, K = 4: factors from the Krylov sketch (VJPs and JVPs, 140 products)."""
    folder = save_tiny_model(tmp_path, "llama", tokenizer, hidden_size=160, num_hidden_layers=3)
    model = load_model(folder, "float64", "cpu", attention="eager")
    ids = torch.tensor([[1, 5, 9, 14, 3, 7, 22]])
    assert_same_measurement(
        measured(model, ids, TOKEN_LOCAL, "matrix_free"),
        measured(model, ids, WHOLE_SEQUENCE, "matrix_free"),
        rtol=1e-10,
    )


@pytest.mark.parametrize("family", ["llama", "gpt2", "gemma2"])
def test_a_prompt_as_long_as_the_head_size_is_re_run_token_locally(family, tokenizer, tmp_path):
    """T = 8 tokens, the tiny models' head size: the rotary tables (1, T, 8) are cut by
    their sequence dimension, not as a T × T mask; every token's re-run is used (none
    falls back) and its Jacobians are the whole-sequence ones."""
    model = tiny_family_model(family, tokenizer, tmp_path)
    assert model.config.hidden_size // model.config.num_attention_heads == 8
    calls, streams = trace_blocks(model, torch.tensor([HEAD_SIZE_PROMPT]))
    for call, stream in zip(calls, streams, strict=False):
        block = TokenLocalBlock(call, stream, 16)
        for token in range(8):
            local = block.at(token, context=True)
            assert local is not None, f"token {token} fell back"
            inputs = list(range(token + 1))
            whole = jacobian_rows(call.branch, stream, token, inputs, 16)
            np.testing.assert_allclose(local.rows(inputs), whole, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    ("family", "dtype"),
    [
        *((family, "float64") for family in ("llama", "gemma2", "gptj", "mpt")),
        *((family, dtype) for family in ("llama", "gemma2") for dtype in ("float32", "bfloat16")),
    ],
)
def test_every_re_run_equals_the_whole_sequence_block_to_rounding(
    family, dtype, tokenizer, tmp_path
):
    """Every token's re-run, with and without the earlier tokens as inputs, is used and
    its output row equals the whole-sequence block's within ROUNDING_EPS ε: in float64,
    where transformers' float32 softmax and norms left them up to 2e-7 apart (GPT-J and
    MPT, whose attention scores in float32, on any CPU; Llama and Gemma 2 on AVX2, where
    the whole-sequence check's √ε sent them to the slow path), and in float32 and
    bfloat16, whose re-runs the check must still take."""
    save_tiny_model(tmp_path, family, tokenizer, **family_sizes(family))
    model = load_model(tmp_path, dtype, "cpu", attention="eager")
    calls, streams = trace_blocks(model, torch.tensor([HEAD_SIZE_PROMPT]))
    eps = torch.finfo(model.dtype).eps
    for call, stream in zip(calls, streams, strict=False):
        block = TokenLocalBlock(call, stream, 16)
        with torch.no_grad():
            whole = call.output(stream[None]).double()
        found = [
            block.at(token, context)
            for token in range(len(HEAD_SIZE_PROMPT))
            for context in (False, True)
        ]
        assert all(local is not None for local in found), [local is None for local in found]
        rows = torch.cat([(local.outputs + local.query).detach() for local in found], dim=1)
        np.testing.assert_allclose(
            rows.double(),
            whole.repeat_interleave(2, dim=1),
            rtol=0,
            atol=ROUNDING_EPS * eps * whole.abs().max().item(),
        )
