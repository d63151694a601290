"""A float64 model computed in float64 throughout.

transformers' modelling code raises half precision where it would lose too much: the
eager attention's softmax (``softmax(scores, dim=-1, dtype=torch.float32)``), the RMS
norms of Llama, Gemma and most families since (``hidden_states.to(torch.float32)``,
``x.float()``), the attention scores of GPT-J, GPT-Neo, CodeGen and MPT. Written for
float16 and bfloat16, these casts lower a float64 model to float32 there: its outputs
carry float32 rounding (about 6e-8 of their size), and that rounding depends on the
shapes the kernels see. On an AVX2 CPU a float32 softmax over a row of 8 scores, the
later ones masked, rounds differently from one over the first 3 of them (6e-8 apart;
AVX-512's kernels happen to agree there), so a block re-run for one token
(``layerlaws.coupling.local``) reproduced the whole-sequence block to 2e-8 to 2e-7
(Llama, Gemma 2 and most others on AVX2; GPT-J, GPT-Neo and CodeGen to 1e-9, MPT to 2e-8
on any CPU), not to float64 rounding. ``keep_float64`` makes every such cast of a float64
tensor one to float64 while the model or any module of it runs: the model's own
operations, in float64 (every family's re-run within 5 ε of its whole-sequence block,
``tests/coupling/test_token_local.py``). Tensors made from integers alone, the rotary
tables made from positions, keep the code's float32: no float64 input reaches them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_KEPT = "_layerlaws_keeps_float64"
"""Attribute marking a model whose modules hold ``keep_float64``'s hooks."""


def _lifted(value: Any) -> Any:
    """float64 for float32, anything else as it is."""
    return torch.float64 if value is torch.float32 else value


class _Float64Casts(TorchFunctionMode):
    """While active, a torch call with a float64 tensor among its arguments computes in
    float64 where it asks for float32 (a ``dtype`` or ``to`` argument, ``Tensor.float``);
    every other call as it is. Entered once however deeply modules nest (``depth``)."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        given = (*args, *kwargs.values())
        if any(isinstance(value, torch.Tensor) and value.dtype == torch.float64 for value in given):
            func = torch.Tensor.double if func is torch.Tensor.float else func
            args = tuple(_lifted(value) for value in args)
            kwargs = {name: _lifted(value) for name, value in kwargs.items()}
        return func(*args, **kwargs)

    def enter(self, *_hook_arguments: Any) -> None:
        if self.depth == 0:
            self.__enter__()
        self.depth += 1

    def leave(self, *_hook_arguments: Any) -> None:
        self.depth -= 1
        if self.depth == 0:
            self.__exit__(None, None, None)


def keep_float64(model: torch.nn.Module) -> torch.nn.Module:
    """``model``, whose casts of float64 tensors to float32 are casts to float64 from now
    on, whichever of its modules is called (module docstring); once per model, and only
    where its floating parameters are float64 (nothing changes for any other dtype)."""
    floating = [parameter for parameter in model.parameters() if parameter.is_floating_point()]
    if getattr(model, _KEPT, False) or not floating or floating[0].dtype != torch.float64:
        return model
    casts = _Float64Casts()
    for module in model.modules():
        module.register_forward_pre_hook(casts.enter)
        module.register_forward_hook(casts.leave, always_call=True)
    setattr(model, _KEPT, True)
    return model
