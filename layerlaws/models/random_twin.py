"""The coupling stage's random twin, Aubry et al.'s untrained control (the same
architecture with freshly initialised weights), drawn block by block straight onto the
devices.

The twin is the model that ``layerlaws.models.preparation.randomly_initialised`` draws —
transformers' ``from_config`` in float32 on the host under ``torch.manual_seed(init_seed)``
— bit for bit, without ever holding it whole on the host. ``from_config`` draws from the
host's generator while the modules are built (``torch.nn.Linear`` and the like initialise
themselves) and in the ``initialize_weights`` pass of each ``post_init`` (a model within
the model, Llama's ``model``, runs its own before the outer model builds its LM head),
which visits the modules children first and initialises each by the model's
``_init_weights``. Here the model is built on the meta device while every draw is made,
and dropped, on a host tensor of the same shape, so that the host's generator advances as
it would (``twin_skeleton``, which records each pass's generator state); then each pass is
run again from its state as transformers runs it, each module's tensors made on the host
in float32 just before its visit, and each *unit* — a residual block, a part beside the
blocks (embeddings, final norm, LM head), or the direct tensors of a module holding blocks
— cast to the model's dtype, quantised like the model's layers (a 4-bit layer is quantised
as it moves) and sent to its device of the model's device map as soon as its visit ends.
The host holds one unit at a time: the float32 weights of the largest block, or of the
embeddings.

A family whose ``_init_weights`` leaves a tensor as its constructor made it (what this path
does not keep; OpenAI GPT's ``Conv1D`` in transformers 5) is found while building the
skeleton and drawn as before, whole on the host, with a warning. Every tensor is made NaN
before its pass: one still NaN after it is a LayerlawsError, never a different twin.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

from layerlaws.core.errors import LayerlawsError
from layerlaws.models.architectures import auto_class, block_paths
from layerlaws.models.preparation import randomly_initialised
from layerlaws.models.quantization import keep_differentiable, quantize_like, quantized_modules

log = logging.getLogger(__name__)

HOST = torch.device("cpu")
EARLY_ON_META = ("orthogonal_", "trunc_normal_", "sparse_")
"""``torch.nn.init`` functions that return at once on a meta tensor, without drawing."""


def _is_meta(value: Any) -> bool:
    """Whether ``value`` is a meta tensor or the meta device."""
    if isinstance(value, torch.Tensor):
        return value.is_meta
    return isinstance(value, torch.device) and value.type == "meta"


def _on_host(value: Any) -> Any:
    """A meta tensor's empty host copy (same shape, strides, dtype), the host for the meta
    device; anything else as it is."""
    if not _is_meta(value):
        return value
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=HOST)
    return HOST


class _DrawsOnTheHost(TorchDispatchMode):
    """Every seeded random operation on the meta device also run, and its result dropped,
    on the host: the host's generator advances as a construction on the host advances
    it, while the tensors stay on the meta device. While a pass ``visiting`` a module
    runs, each meta storage an operation writes is recorded with that module in
    ``last_writer`` (by the storage's address, the storage kept, so that no later one
    takes its address)."""

    def __init__(self) -> None:
        super().__init__()
        self.visiting: Any = None
        self.last_writer: dict[int, Any] = {}
        self.written: list[torch.UntypedStorage] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        meta = any(_is_meta(value) for value in tree_leaves((args, kwargs)))
        if meta and torch.Tag.nondeterministic_seeded in func.tags:
            host_args, host_kwargs = tree_map(_on_host, (args, kwargs))
            func(*host_args, **host_kwargs)
        if self.visiting is not None and func._schema.is_mutable and _is_meta(args[0]):
            storage = args[0].untyped_storage()
            self.last_writer[storage._cdata] = self.visiting
            self.written.append(storage)
        return func(*args, **kwargs)


def _drawn_on_the_host(original: Any) -> Any:
    """``original`` (one of ``EARLY_ON_META``) that, given a meta tensor, draws on a host
    tensor of its shape and copies it in (a write the meta tensor records), as on the
    host."""

    def draw(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if not tensor.is_meta:
            return original(tensor, *args, **kwargs)
        return tensor.copy_(original(_on_host(tensor), *args, **kwargs))

    return draw


@contextlib.contextmanager
def _meta_draws_on_the_host() -> Iterator[None]:
    """``EARLY_ON_META`` drawing on the host for meta tensors, as torch and transformers
    (which keeps torch's own in ``TORCH_INIT_FUNCTIONS``) call them."""
    from transformers.initialization import TORCH_INIT_FUNCTIONS

    originals = {name: getattr(torch.nn.init, name) for name in EARLY_ON_META}
    kept = {name: TORCH_INIT_FUNCTIONS[name] for name in EARLY_ON_META}
    try:
        for name in EARLY_ON_META:
            setattr(torch.nn.init, name, _drawn_on_the_host(originals[name]))
            TORCH_INIT_FUNCTIONS[name] = _drawn_on_the_host(kept[name])
        yield
    finally:
        for name in EARLY_ON_META:
            setattr(torch.nn.init, name, originals[name])
            TORCH_INIT_FUNCTIONS[name] = kept[name]


@dataclass(frozen=True)
class _Pass:
    """One ``initialize_weights`` pass of the construction: over ``model`` (the whole
    model, or a model within it, whose ``post_init`` ran first), from the host generator's
    ``state``, visiting for the first time the ``modules``."""

    model: Any
    state: torch.Tensor
    modules: tuple[Any, ...]


def _visited(model: Any) -> Iterator[Any]:
    """The modules of ``model`` that an ``initialize_weights`` pass has visited."""
    return (module for module in model.modules() if getattr(module, "_is_hf_initialized", False))


@contextlib.contextmanager
def _passes_recorded(
    passes: list[_Pass], visits: list[Any], draws: _DrawsOnTheHost
) -> Iterator[None]:
    """transformers' ``PreTrainedModel.init_weights`` (its pass, then the ties) run on the
    meta device too, where transformers skips the pass: each pass recorded in ``passes``,
    each module it visits (first visits, in order) in ``visits``, and ``draws`` told
    which module a pass is visiting."""
    from transformers import PreTrainedModel

    init_weights, initialize = PreTrainedModel.init_weights, PreTrainedModel._initialize_weights

    def recorded_init_weights(self: Any) -> None:
        state, before = torch.get_rng_state(), set(_visited(self))
        self.initialize_weights()
        passes.append(_Pass(self, state, tuple(m for m in _visited(self) if m not in before)))
        self.tie_weights(recompute_mapping=False)

    def recorded_visit(self: Any, module: Any, is_custom_code: bool = False) -> None:
        if not getattr(module, "_is_hf_initialized", False):
            visits.append(module)
        draws.visiting = module
        try:
            initialize(self, module, is_custom_code)
        finally:
            draws.visiting = None

    PreTrainedModel.init_weights = recorded_init_weights
    PreTrainedModel._initialize_weights = recorded_visit
    try:
        yield
    finally:
        PreTrainedModel.init_weights = init_weights
        PreTrainedModel._initialize_weights = initialize


@dataclass(frozen=True)
class TwinSkeleton:
    """The twin built on the meta device (``twin_skeleton``)."""

    model: Any
    passes: list[_Pass]
    """The ``initialize_weights`` passes of its construction, in order."""
    state: torch.Tensor
    """The host generator's state where ``from_config`` leaves it."""
    unwritten: list[str]
    """Its parameters and buffers that no pass writes (the constructor's values kept)."""
    placements: dict[int, list[tuple[str, bool]]]
    """id of a module → the units (name, whole subtree or not: ``_unit_scopes``) to place
    once its visit ends: the last visit that writes any of a unit's tensors (T5's model
    draws its shared embeddings again after its stacks), or the unit's own."""


def twin_skeleton(model: Any, init_seed: int) -> TwinSkeleton:
    """``model``'s architecture and config built on the meta device in float32 under
    ``torch.manual_seed(init_seed)``, every draw of ``from_config`` on the host made, and
    dropped, on the host; the passes' visits forgotten (``_initialised_in_units`` runs them
    again for real)."""
    torch.manual_seed(init_seed)
    config = copy.deepcopy(model.config)  # from_config sets the config's dtype
    passes: list[_Pass] = []
    visits: list[Any] = []
    draws = _DrawsOnTheHost()
    with (
        torch.device("meta"),
        draws,
        _passes_recorded(passes, visits, draws),
        _meta_draws_on_the_host(),
    ):
        skeleton = auto_class(config.model_type).from_config(config, dtype=torch.float32)
    for run in passes:
        for module in run.modules:
            del module._is_hf_initialized
    writers = draws.last_writer
    unwritten = [
        name
        for name, tensor in [*skeleton.named_parameters(), *skeleton.named_buffers()]
        if tensor.untyped_storage()._cdata not in writers
    ]
    order = {id(module): index for index, module in enumerate(visits)}
    placements: dict[int, list[tuple[str, bool]]] = {}
    for name, whole in _unit_scopes(skeleton).items():
        unit = skeleton.get_submodule(name)
        candidates = [unit] + [
            writers[tensor.untyped_storage()._cdata]
            for _, _, tensor in _tensors(unit, whole)
            if tensor.untyped_storage()._cdata in writers
        ]
        last = max(candidates, key=lambda module: order.get(id(module), -1))
        placements.setdefault(id(last), []).append((name, whole))
    return TwinSkeleton(skeleton, passes, torch.get_rng_state(), unwritten, placements)


def _unit_scopes(skeleton: Any) -> dict[str, bool]:
    """Module name → whether its whole subtree is one unit (a block, or a part beside the
    blocks) or only its direct tensors are (a module holding blocks: the model, its block
    list)."""
    holders = {""}
    for block in block_paths(skeleton):
        parts = block.split(".")
        holders |= {".".join(parts[:end]) for end in range(1, len(parts))}
    scopes = dict.fromkeys(holders, False)
    for name, _ in skeleton.named_modules():
        if name not in holders and name.rpartition(".")[0] in holders:
            scopes[name] = True
    return scopes


def _tensors(module: Any, whole: bool) -> Iterator[tuple[Any, str, torch.Tensor]]:
    """(owning module, name in it, tensor) of every parameter and buffer of ``module``'s
    subtree (``whole``) or of ``module`` itself."""
    for owner in module.modules() if whole else [module]:
        for kind in (owner._parameters, owner._buffers):
            for name, tensor in kind.items():
                if tensor is not None:
                    yield owner, name, tensor


def device_of(name: str, device_map: Mapping[str, Any], default: Any) -> Any:
    """The device that ``device_map`` (accelerate's module name → device) gives the module
    ``name``: that of its nearest listed ancestor (``""``: the whole model), else
    ``default``."""
    listed = [key for key in device_map if key in ("", name) or name.startswith(key + ".")]
    return device_map[max(listed, key=len)] if listed else default


class _Placer:
    """Casts, quantises and sends each drawn unit of ``twin`` to its device, like the
    trained ``model``."""

    def __init__(self, twin: Any, model: Any) -> None:
        from accelerate.utils import set_module_tensor_to_device

        reference = model.get_input_embeddings().weight  # never quantised
        self.twin, self.model, self.move = twin, model, set_module_tensor_to_device
        self.dtype, self.default = reference.dtype, reference.device
        self.device_map = getattr(model, "hf_device_map", None) or {}
        self.quantized = bool(quantized_modules(model))

    def place(self, name: str, whole: bool) -> None:
        """The unit ``name`` (its module's subtree, or its direct tensors) checked, cast,
        quantised and on its device."""
        module = self.twin.get_submodule(name)
        for owner, tensor_name, tensor in _tensors(module, whole):
            if not tensor.is_floating_point():
                continue
            if bool(torch.isnan(tensor).any()):
                raise LayerlawsError(
                    f"{type(self.twin).__name__}'s initialisation leaves {name}: "
                    f"{tensor_name} undrawn; the random twin cannot be drawn block by block"
                )
            self.move(owner, tensor_name, HOST, value=tensor, dtype=self.dtype)
        device = device_of(name, self.device_map, self.default)
        if whole:
            if self.quantized:
                quantize_like(self.twin, self.model, within=name)
                module = self.twin.get_submodule(name)
                for visited in module.modules():  # the new layers too, as later passes skip
                    visited._is_hf_initialized = True
            module.to(device)  # a 4-bit layer is quantised as it moves
        else:
            for owner, tensor_name, _ in _tensors(module, whole):
                self.move(owner, tensor_name, device)


def _materialise(module: Any) -> None:
    """``module``'s own tensors made on the host, floating ones NaN (``_Placer.place``
    checks that its pass drew them all)."""
    module.to_empty(device=HOST, recurse=False)
    for _, _, tensor in _tensors(module, whole=False):
        if tensor.is_floating_point():
            tensor.data.fill_(math.nan)


def _initialised_in_units(skeleton: TwinSkeleton, placer: _Placer) -> None:
    """The construction's ``initialize_weights`` passes run again, each from its recorded
    state of the host's generator, each module made on the host just before its first
    visit and each unit placed once the last visit that writes it ends."""
    from transformers import PreTrainedModel

    twin = skeleton.model
    models = [module for module in twin.modules() if isinstance(module, PreTrainedModel)]

    def visiting(initialise: Any) -> Any:
        def visit(module: Any, is_custom_code: bool = False) -> None:
            if getattr(module, "_is_hf_initialized", False):
                return  # visited by an earlier pass: transformers skips it
            _materialise(module)
            initialise(module, is_custom_code)
            for name, whole in skeleton.placements.get(id(module), []):
                placer.place(name, whole)

        return visit

    for model in models:
        model._initialize_weights = visiting(model._initialize_weights)
    try:
        for run in skeleton.passes:
            torch.set_rng_state(run.state)
            run.model.initialize_weights()
            run.model.tie_weights(recompute_mapping=False)
    finally:
        for model in models:
            del model._initialize_weights
    torch.set_rng_state(skeleton.state)


def _drawn_whole(model: Any, init_seed: int) -> Any:
    """The twin drawn whole on the host, cast and made quantisable like ``model`` (for the
    families ``twin_skeleton`` finds with tensors that no pass writes)."""
    twin = randomly_initialised(model, init_seed)
    twin = twin.to(model.get_input_embeddings().weight.dtype)
    return quantize_like(twin, model) if quantized_modules(model) else twin


def randomly_initialised_twin(model: Any, init_seed: int) -> Any:
    """A model of ``model``'s architecture and config with fresh weights seeded by
    ``init_seed`` — ``randomly_initialised(model, init_seed)`` in ``model``'s dtype, bit
    for bit — placed like ``model`` (each block on its device of ``model``'s device map)
    and quantised like it, drawn one unit at a time (module docstring): the host holds
    the float32 weights of one block, or of the embeddings, never the whole twin."""
    skeleton = twin_skeleton(model, init_seed)
    placer = _Placer(skeleton.model, model)
    if skeleton.unwritten:
        log.warning(
            "%s's initialisation keeps its constructor's %s: its random twin is drawn whole "
            "on the host",
            type(model).__name__,
            ", ".join(skeleton.unwritten[:3]),
        )
        twin = _drawn_whole(model, init_seed)
    else:
        _initialised_in_units(skeleton, placer)
        twin = skeleton.model
    if placer.device_map:
        from accelerate import dispatch_model

        twin = dispatch_model(twin, device_map=placer.device_map)  # hooks; moves a whole twin
    else:
        twin = twin.to(placer.default)
    if placer.quantized:
        keep_differentiable(twin)
    return twin.eval().requires_grad_(False)
