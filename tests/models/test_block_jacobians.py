"""The coupling stage's block Jacobians are the model's own steps, for every family.

For a tiny random model of every family of the architecture table (three blocks) and one
five-token prompt, the Jacobian the stage computes for the first, the middle and the last
block (``trace_blocks`` and d VJPs per output token, through the whole sequence and
through the block re-run for that token alone — ``coupling.products: token_local`` —
the residual branch's J, plus the identity) is compared, for every (output token, input
token) pair, with the Jacobian of the model's
real step taken by ``torch.autograd`` through the whole forward pass
(``tests/whole_model_jacobians.py``: the stream substituted at a pre-hook on block l,
recorded entering block l + 1 or the head, after the final norm for the last block,
Aubry et al. Eq. 7; no cache, so stateful blocks recompute every token).

Bounds: both sides evaluate the same operations, in another order (one block re-run alone
with vmapped VJPs, against the whole model with vmapped VJPs), so they differ by rounding
only: 1e-12 of the largest entry in float64 (about 5,000 ulps), 1e-5 in float32 (about 80
ulps) — float32 only for the families that do not run in float64 (``FLOAT32_FAMILIES``).
Each token pair's block is also checked against its own scale (``PAIR_BOUNDS``), so small
blocks (the token mixing of a state-space layer is 1e-5 of the identity) are checked too.
"""

from __future__ import annotations

import pytest
import torch
from tiny_models import (
    ALL_FAMILIES,
    FLOAT32_FAMILIES,
    HYBRID_FAMILIES,
    tiny_family_model,
)
from whole_model_jacobians import (
    ENCODER_FAMILIES,
    pipeline_self_jacobians,
    pipeline_step_jacobian,
    reference_step_jacobian,
    relative_difference,
    whole_model_step,
)

from layerlaws.models.architectures import ARCHITECTURES

pytestmark = pytest.mark.slow

BLOCKS = {"first": 0, "middle": 1, "last": 2}
PROMPT = [1, 5, 9, 14, 3]
"""Token ids of the prompt (1 is the test tokenizer's BOS)."""
BOUNDS = {torch.float64: 1e-12, torch.float32: 1e-5}
"""‖J_pipeline − J_reference‖_max / ‖J_reference‖_max, by dtype."""
PAIR_BOUNDS = {torch.float64: 1e-9, torch.float32: 1e-3}
"""The same within each (output, input) token pair's d × d block, relative to that block."""
MIXING_FLOOR = 1e-6
"""Least share of the largest entry that the last token's dependence on the first (the
first's on the last in an encoder) has in the reference: it is recomputed from the
substituted stream, not read from a cache."""


def pair_differences(jacobian: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Per token pair (t2, t1), ‖ΔJ‖_max / ‖J_ref‖_max of its d × d block; 0 where the
    reference block is zero and so is the difference, inf where only the reference is."""
    difference = (jacobian - reference).abs().amax(dim=(1, 3))
    scale = reference.abs().amax(dim=(1, 3))
    return torch.where(scale > 0, difference / scale, difference * torch.inf).nan_to_num(0.0)


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_block_jacobians_are_the_models_own_steps(family, tokenizer, tmp_path):
    model = tiny_family_model(family, tokenizer, tmp_path)
    row = ARCHITECTURES[model.config.model_type]
    ids = torch.tensor([PROMPT])
    dtype = next(model.parameters()).dtype
    assert dtype == (torch.float32 if family in FLOAT32_FAMILIES else torch.float64)
    length = len(PROMPT)
    later = torch.triu(torch.ones(length, length, dtype=torch.bool), diagonal=1)  # t1 > t2
    for name, block in BLOCKS.items():
        jacobian, streams = pipeline_step_jacobian(model, ids, block)
        local, _ = pipeline_step_jacobian(model, ids, block, local=True)
        falls_back = row.whole_sequence_products is not None and (
            family not in HYBRID_FAMILIES or block != 1
        )
        assert (local is None) == falls_back, f"{name} block: token-local {local is not None}"
        with torch.no_grad():
            reached = whole_model_step(model, ids, block)(streams[block])
        step_error = ((reached - streams[block + 1]).abs().max() / reached.abs().max()).item()
        assert step_error <= BOUNDS[dtype], f"{name} block's step: {step_error:.1e}"

        reference = reference_step_jacobian(model, ids, block, streams[block])
        assert reference.shape == (length, model.config.hidden_size) * 2
        for path, found, bounded in (
            ("whole-sequence", jacobian, dtype),
            ("token-local", local, dtype),
        ):
            if found is None:
                continue
            error = relative_difference(found, reference)
            assert error <= BOUNDS[bounded], f"{name} block, {path}: {error:.1e}"
            pairs = pair_differences(found, reference)
            assert pairs.max().item() <= PAIR_BOUNDS[bounded], f"{name} block, {path}: {pairs}"

        # The depth and self kinds: each token's J_tt with the earlier tokens' keys and
        # values constant, their attention split from the token's own where it can be.
        own, split = pipeline_self_jacobians(model, ids, block)
        if local is not None and family not in ENCODER_FAMILIES:
            assert own is not None
            assert all(split[1:]) == (row.whole_attention is None), f"{name} block: {split}"
            diagonal = reference.diagonal(dim1=0, dim2=2).permute(2, 0, 1)  # [t, i, j]
            error = relative_difference(own, diagonal)
            assert error <= BOUNDS[dtype], f"{name} block, self kind: {error:.1e}"

        pair_scale = reference.abs().amax(dim=(1, 3))
        mixing = pair_scale[0, -1] if family in ENCODER_FAMILIES else pair_scale[-1, 0]
        assert mixing.item() > MIXING_FLOOR * pair_scale.max().item()
        if family not in ENCODER_FAMILIES:  # causal: no output depends on a later input
            assert pair_scale[later].max().item() == 0
