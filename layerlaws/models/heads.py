"""The model's own output head applied to any layer's residual stream (the logit lens), for
every family of the architecture table.

The head is what the family's forward pass does between the last block and the logits:
its final norm (none for post-LN models), the module that reads layer L (the LM head, or
an encoder's masked-LM head with its own transform) and the scaling some families apply to
its output (``LOGIT_SCALINGS``). Applied to x^L it gives the model's own logits; applied to
x^l, l < L, what the model would predict had it stopped after block l (Aubry et al.,
Fig. 24, row 4: entropy of the logits against depth).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from layerlaws.models.architectures import head_input_of
from layerlaws.models.blocks import final_norm_of

LOGIT_SCALINGS: dict[str, Callable[[torch.Tensor, float], torch.Tensor]] = {
    "logit_scale": lambda logits, scale: logits * scale,  # Cohere
    "logits_scaling": lambda logits, scale: logits / scale,  # Granite
    "final_logit_softcapping": lambda logits, cap: torch.tanh(logits / cap) * cap,  # Gemma 2, 3
    "logits_soft_cap": lambda logits, cap: torch.tanh(logits / cap) * cap,  # RecurrentGemma
}
"""What a family's forward pass does to the head's output, by the config attribute that
holds its constant (absent or None: nothing)."""


def _device_of(module: torch.nn.Module, fallback: torch.device) -> torch.device:
    """Where ``module`` keeps its weights (``fallback`` for a module without any)."""
    tensor = next(module.parameters(), None)
    if tensor is None:
        tensor = next(module.buffers(), None)
    return fallback if tensor is None else tensor.device


def _apply(module: torch.nn.Module, states: torch.Tensor) -> torch.Tensor:
    """``module`` applied to ``states`` moved to its device."""
    return module(states.to(_device_of(module, states.device)))


@torch.no_grad()
def head_logits(model: torch.nn.Module, states: torch.Tensor, *, normed: bool) -> torch.Tensor:
    """The logits (T, V) the model's head gives for residual-stream states (T, d) of one
    sequence: its final norm (skipped when ``normed``, the states having passed it
    already, or when the model has none), its LM head (or masked-LM head) and its
    family's scaling of the output; float32 at least, on the head's device."""
    norm = None if normed else final_norm_of(model)
    states = states[None] if norm is None else _apply(norm, states[None])
    logits = _apply(head_input_of(model), states)[0]
    for attribute, scaling in LOGIT_SCALINGS.items():
        constant = getattr(model.config, attribute, None)
        if constant is not None:
            logits = scaling(logits, constant)
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


def lens_entropy_and_loss(
    model: torch.nn.Module, streams: torch.Tensor, input_ids: torch.Tensor, *, normed_last: bool
) -> tuple[np.ndarray, np.ndarray]:
    """The logit lens at every layer of one sequence: ``streams`` (L + 1, T, d) are x^0 …
    x^L (x^L after the final norm when ``normed_last``), ``input_ids`` (T,) its tokens.
    Returns the entropy of softmax(logits) and the next-token loss −log p(x_{t+1}), both
    (L + 1, T) float64 in nats; the loss is NaN at the last token, which has no next."""
    last = len(streams) - 1
    entropy = np.empty(streams.shape[:2])
    loss = np.full(streams.shape[:2], np.nan)
    for layer, states in enumerate(streams):
        logits = head_logits(model, states, normed=normed_last and layer == last).double()
        log_p = torch.log_softmax(logits, dim=-1)
        entropy[layer] = torch.special.entr(log_p.exp()).sum(dim=-1).cpu().numpy()
        following = input_ids[1:].to(log_p.device)
        loss[layer, :-1] = (-log_p[:-1].gather(1, following[:, None])[:, 0]).cpu().numpy()
    return entropy, loss
