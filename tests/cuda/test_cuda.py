"""The GPU paths on a real CUDA device: a bfloat16 model pass against float64 lstsq on
float32 states, device claims, a real out-of-memory split, a device map over the visible
GPUs, a bfloat16-autocast training step, the Jacobians of blocks quantised to 4 bits (nf4
and fp4) by bitsandbytes' CUDA kernels, the coupling's random twin drawn onto the GPUs a
block at a time.

Every test is marked ``cuda`` and runs wherever torch sees a CUDA device; elsewhere each is
skipped, saying that no CUDA device is visible and why. The references are computed on the
CPU in float32/float64 (``tests/lstsq_reference.py``: the regression rows built by hand and
solved with ``numpy.linalg.lstsq``), never with the GPU code under test.
"""

from __future__ import annotations

import fcntl
import os

import numpy as np
import polars as pl
import pytest
import torch
from conftest import TINY_TRAINING, llama_tokenizer
from lstsq_reference import reference_pr
from safetensors.torch import load_file
from tiny_models import save_tiny_model
from whole_model_jacobians import assert_blocks_jacobians

from layerlaws.core.errors import LayerlawsError
from layerlaws.equilearning.statistics import EquilearningStatistics
from layerlaws.forward.kept_states import HiddenStates
from layerlaws.forward.kept_writer import extract_hidden_states
from layerlaws.forward.model_pass import run_forward_pass
from layerlaws.models.architectures import blocks_of
from layerlaws.models.devices import claim_devices
from layerlaws.models.facts import weights_folder
from layerlaws.models.loading import load_model, load_tokenizer, plan_placement
from layerlaws.models.placement import device_budgets, device_map
from layerlaws.models.preparation import prepare_model, randomly_initialised, skeleton_of
from layerlaws.models.quantization import quantize_like, quantized_modules
from layerlaws.models.random_twin import randomly_initialised_twin
from layerlaws.text.tokens import tokenize_sentences
from layerlaws.training.plan import TrainingSpec, checkpoint_folder
from layerlaws.training.train import model_config, packed_texts, train


def _no_cuda_reason() -> str:
    return (
        "no CUDA device visible: torch.cuda.is_available() is False "
        f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}, torch "
        f"{torch.__version__}, built for CUDA {torch.version.cuda})"
    )


pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason=_no_cuda_reason()),
]

OFFSETS, NORMS, CONTROLS = [0, 1], ["model", "none"], ["none"]
FLOAT32_BOUND = 1e-5
"""|PR of a float32 pass on the GPU − float64 lstsq on the CPU's float32 states|: the two
devices' float32 arithmetic differ in rounding only (a float32 pass on the CPU agrees to
1e-15; a bfloat16 one is off by 1e-4 and more)."""
BFLOAT16_BOUND = 0.005
"""|PR of a bfloat16 pass − the same reference|, absolute: bfloat16 keeps 8 bits of
mantissa, so the states are off by about 0.4 % of their scale. On the CPU the same
bfloat16 pass of this tiny model is off by 1.9e-4 at most (SmolLM2: bench/bf16.py)."""


@pytest.fixture(scope="module")
def tiny(llama_folder, texts, tmp_path_factory):
    """The tiny Llama prepared, 40 texts tokenised (24 tokens at most), and the float32
    states of a CPU pass kept: (folder, facts, tokens, HiddenStates)."""
    root = tmp_path_factory.mktemp("cuda")
    folder = root / "model"
    facts = prepare_model({"source": {"kind": "local", "path": str(llama_folder)}}, folder)
    sentences = pl.DataFrame(
        {"sentence_id": list(range(40)), "text": texts[:40], "source": ["t"] * 40}
    )
    tokens = tokenize_sentences(sentences, load_tokenizer(folder), max_tokens=24)
    extract_hidden_states(
        load_model(folder, "float32", "cpu"),
        facts,
        tokens,
        out_folder=root / "hidden",
        batch_size=8,
        device="cpu",
        progress=False,
    )
    return folder, facts, tokens, HiddenStates.open(root / "hidden")


def reference_table(hidden: HiddenStates) -> dict[tuple[int, int, str], float]:
    """(layer, offset, norm) → PR by float64 lstsq on the kept CPU float32 states."""
    return {
        (layer, offset, norm): reference_pr(hidden, layer, offset, norm, False)[0]
        for layer in range(hidden.num_layers + 1)
        for offset in OFFSETS
        for norm in NORMS
    }


def measured_pr(model, facts, tokens, device: str, batch_size: int = 8):
    """(layer, offset, norm) → PR of the streamed pass of ``model`` with inputs on
    ``device``, and the pass's report."""
    statistics = EquilearningStatistics(facts, OFFSETS, NORMS, CONTROLS, 0)
    report = run_forward_pass(
        model, facts, tokens, [statistics], batch_size, device, progress=False
    )
    table = {
        (row["layer"], row["offset"], row["norm"]): row["pr"]
        for row in statistics.table().iter_rows(named=True)
    }
    return table, report, statistics


def largest_difference(measured: dict, reference: dict) -> float:
    """The largest |measured − reference| over the keys (NaN where any value is NaN)."""
    assert set(measured) == set(reference) and reference
    keys = list(reference)
    return float(np.max(np.abs(np.array([measured[k] - reference[k] for k in keys]))))


def test_bfloat16_pass_on_the_gpu_is_within_its_bound_of_float32_lstsq(tiny):
    folder, facts, tokens, hidden = tiny
    reference = reference_table(hidden)
    single, report, statistics = measured_pr(
        load_model(folder, "float32", "cuda:0"), facts, tokens, "cuda:0"
    )
    assert report["device"] == "cuda:0" and report["compute_dtype"] == "float32"
    # The statistics stay on the GPU, in float64.
    assert {(m.mean.device.type, m.mean.dtype) for m in statistics.total.values()} == {
        ("cuda", torch.float64)
    }
    assert largest_difference(single, reference) <= FLOAT32_BOUND
    half, report, _ = measured_pr(load_model(folder, "bfloat16", "cuda:0"), facts, tokens, "cuda:0")
    assert report["compute_dtype"] == "bfloat16"
    assert 0 < largest_difference(half, reference) <= BFLOAT16_BOUND


def visible_ids() -> list[str]:
    """The GPUs' ids as the machine names them, from the environment and torch's count."""
    count = torch.cuda.device_count()
    preset = os.environ.get("CUDA_VISIBLE_DEVICES")
    if preset is None:
        return [str(index) for index in range(count)]
    return [entry.strip() for entry in preset.split(",") if entry.strip()][:count]


def locked(path) -> bool:
    """Whether another open file holds ``path``'s flock."""
    descriptor = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(descriptor, fcntl.LOCK_UN)
        return False
    finally:
        os.close(descriptor)


@pytest.mark.parametrize("requested", ["auto", "cuda"])
def test_claims_take_the_real_gpus(requested, tmp_path):
    ids, count = visible_ids(), torch.cuda.device_count()
    with claim_devices(requested, tmp_path, count=count) as claim:
        assert claim.devices == tuple(f"cuda:{index}" for index in range(count))
        assert claim.gpu_ids == tuple(ids)
        assert all(f"(GPU id {gpu_id})" in claim.describe() for gpu_id in ids)
        locks = sorted(tmp_path.glob("gpu-*.lock"))
        assert len(locks) == count and all(locked(path) for path in locks)
        for device in claim.devices:
            assert torch.ones(3, device=device).sum().item() == 3
    assert not any(locked(path) for path in locks)
    too_many = claim_devices(requested, tmp_path, count=count + 1)
    with pytest.raises(LayerlawsError, match=f"needs {count + 1} GPUs but only {count}"):
        too_many.__enter__()


class AllocatingAtBlock:
    """Before ``block`` runs, allocates ``per_sequence`` bytes of GPU memory for each
    sequence of its batch (a real allocation, so a batch too large for what is free raises
    the CUDA allocator's own out-of-memory error); records the batch sizes seen."""

    def __init__(self, model, block: int, per_sequence: int) -> None:
        self.calls: list[int] = []

        def allocate(_module, args, kwargs):
            states = args[0] if args else kwargs["hidden_states"]
            self.calls.append(len(states))
            workspace = torch.empty(len(states) * per_sequence, dtype=torch.uint8, device="cuda")
            workspace.fill_(1)
            del workspace

        self.hook = blocks_of(model)[block].register_forward_pre_hook(allocate, with_kwargs=True)


class Recorder:
    """An observer that keeps what it is shown, on the CPU: {layer: {row: state}}."""

    def __init__(self) -> None:
        self.seen: dict[int, dict[int, np.ndarray]] = {}
        self.counts: dict[int, int] = {}

    def begin_batch(self, batch) -> None:
        self.rows = batch.row_numbers

    def observe(self, layer, states) -> None:
        for row, state in zip(self.rows, states.float().cpu().numpy(), strict=True):
            self.seen.setdefault(layer, {})[int(row)] = state
            self.counts[layer] = self.counts.get(layer, 0) + 1


def fill_gpu_but(room: int) -> list[torch.Tensor]:
    """Tensors that take the first GPU's free memory but ``room`` bytes (chunks of at most
    1 GiB, so fragmentation cannot refuse one huge block)."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    ballast = []
    while (excess := torch.cuda.mem_get_info()[0] - room) > 2**21:
        ballast.append(torch.empty(min(excess, 2**30), dtype=torch.uint8, device="cuda"))
    return ballast


def test_a_real_out_of_memory_splits_the_batch_and_resumes(tiny):
    """The GPU is filled but for room for 2.5 sequences' workspace at block 2: a batch of
    7 runs out of memory there and is split as the injected test of
    tests/forward/test_forward_pass.py is (7 → 3 + 4, 3 → 1 + 2, 4 → 2 + 2)."""
    folder, facts, all_tokens, _ = tiny
    tokens = all_tokens.filter(pl.col("sentence_id") < 7)
    model = load_model(folder, "float32", "cuda:0")
    reference = Recorder()
    run_forward_pass(model, facts, tokens, [reference], 7, "cuda:0", progress=False)
    per_sequence = 256 * 2**20
    allocating = AllocatingAtBlock(model, block=2, per_sequence=per_sequence)
    retried, ballast = Recorder(), []
    try:
        ballast += fill_gpu_but(5 * per_sequence // 2)
        report = run_forward_pass(model, facts, tokens, [retried], 7, "cuda:0", progress=False)
    finally:
        allocating.hook.remove()
        ballast.clear()
        torch.cuda.empty_cache()
    assert allocating.calls == [7, 3, 1, 2, 4, 2, 2]
    assert report["out_of_memory_retries"] == 3
    assert retried.counts == reference.counts  # nothing observed twice, nothing missed
    for layer, states in reference.seen.items():
        for row, state in states.items():
            np.testing.assert_allclose(retried.seen[layer][row], state, rtol=0, atol=1e-5)


def test_a_device_map_over_the_visible_gpus_measures_like_one_device(tiny):
    """The balanced device map over every visible GPU (blocks whole, in order, each on its
    planned GPU; with one GPU a map that puts everything on it, loaded by accelerate) gives
    the PR of float64 lstsq on the CPU's states."""
    folder, facts, tokens, hidden = tiny
    devices = [f"cuda:{index}" for index in range(torch.cuda.device_count())]
    budgets = device_budgets(devices)
    from transformers import AutoConfig

    skeleton = skeleton_of(AutoConfig.from_pretrained(weights_folder(folder)), False)
    plan = device_map(skeleton, torch.float32, budgets)
    used = {torch.device(device) for device in plan.values()}
    if len(devices) > 1:
        assert plan_placement(folder, "float32", devices, budgets) == plan
        assert len(used) > 1, plan  # balanced: the blocks are spread
    blocks = [plan[name] for name in plan if name.startswith("model.layers.")]
    assert blocks == sorted(blocks, key=devices.index)  # whole blocks, in order
    model = load_model(folder, "float32", plan)
    for module, device in plan.items():
        placed = {p.device for p in model.get_submodule(module).parameters()}
        assert placed <= {torch.device(device)}, module
    measured, _, statistics = measured_pr(model, facts, tokens, devices[0])
    assert largest_difference(measured, reference_table(hidden)) <= FLOAT32_BOUND
    # The statistics of a layer stay on a GPU its model runs on.
    held = {moments.mean.device for moments in statistics.total.values()}
    assert torch.device(devices[0]) in held and held <= used


TRAINING = TINY_TRAINING | {
    "steps": 2,
    "warmup_steps": 1,
    "checkpoints": [0, 2],
    "eval_every": 2,
}
"""Two steps of a tiny Llama, a checkpoint before and after."""
AUTOCAST_LOSS_BOUND = 0.05
"""|held-out loss under bfloat16 autocast − the float32 loss on the CPU|, nats (the loss
is about ln 400 ≈ 6; bfloat16 logits are off by about 0.4 %; float32 on the CPU agrees
with it to 1e-6)."""


def test_training_steps_run_under_bfloat16_autocast_with_float32_weights(texts, tmp_path):
    tokenizer = llama_tokenizer(texts)
    spec = TrainingSpec.of(TRAINING)
    sequences = packed_texts(tokenizer, texts[:60], spec.context)
    held_out = packed_texts(tokenizer, texts[60:], spec.context)[:4]
    outputs: list[tuple[torch.dtype, torch.dtype, bool]] = []

    def linear_output(module, _inputs, output):
        if isinstance(module, torch.nn.Linear) and torch.is_grad_enabled():
            outputs.append((module.weight.dtype, output.dtype, output.device.type == "cuda"))

    hook = torch.nn.modules.module.register_module_forward_hook(linear_output)
    try:
        run = train(
            spec,
            model_config(spec, tokenizer),
            tokenizer,
            sequences,
            held_out=held_out,
            folder=tmp_path,
            device="cuda:0",
        )
    finally:
        hook.remove()
    # Training steps (with gradients): float32 weights, bfloat16 products, on the GPU.
    assert outputs and set(outputs) == {(torch.float32, torch.bfloat16, True)}
    losses = [row["train_loss"] for row in run.curve if row["train_loss"] is not None]
    assert len(losses) == spec.steps and np.isfinite(losses).all()
    for step, record in zip(spec.checkpoints, run.checkpoints, strict=True):
        weights = load_file(str(checkpoint_folder(tmp_path, step) / "model.safetensors"))
        assert {tensor.dtype for tensor in weights.values()} == {torch.float32}
        # The recorded held-out loss (autocast) against float32 on the CPU.
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(
            checkpoint_folder(tmp_path, step), dtype=torch.float32
        )
        ids = torch.from_numpy(held_out)
        with torch.no_grad():
            logits = model(input_ids=ids).logits[:, :-1].double()
        expected = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1)
        ).item()
        assert abs(record["held_out_loss"] - expected) <= AUTOCAST_LOSS_BOUND, step


FOUR_BIT_SIZES = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "max_position_embeddings": 64,
}
"""A tiny Llama whose layers bitsandbytes quantises in blocks of 64."""


@pytest.mark.parametrize("quantization", ["nf4", "fp4"])
def test_four_bit_blocks_jacobians_on_the_gpu_are_their_own(texts, tmp_path, quantization):
    """A tiny Llama quantised to nf4 and to fp4 (Aubry et al.'s demo: load_in_4bit without
    a type) on the GPU: every linear layer a 4-bit layer of that type, and each block's
    Jacobian by both product paths (token-local, not fallen back) against the whole-model
    autograd reference on the same device, to float32's bound."""
    folder = save_tiny_model(tmp_path, "llama", llama_tokenizer(texts), **FOUR_BIT_SIZES)
    model = load_model(folder, "float32", "cuda:0", "eager", quantization)
    layers = quantized_modules(model)
    assert len(layers) == 14
    assert {model.get_submodule(name).weight.quant_type for name in layers} == {quantization}
    assert_blocks_jacobians(model, torch.tensor([[1, 5, 9, 14, 3]], device="cuda:0"), 1e-5)


@pytest.mark.parametrize("quantization", ["none", "nf4"])
def test_the_random_twin_drawn_onto_the_gpu_is_the_whole_twin(texts, tmp_path, quantization):
    """The coupling's random twin of a tiny Llama in bfloat16 on the GPU, drawn a block at
    a time (in nf4 each block quantised as it is placed, by bitsandbytes' CUDA kernels):
    every weight on the GPU and equal to the whole twin drawn on the host, cast,
    quantised like the model and moved as a whole."""
    folder = save_tiny_model(tmp_path, "llama", llama_tokenizer(texts), **FOUR_BIT_SIZES)
    model = load_model(folder, "bfloat16", "cuda:0", "eager", quantization)
    twin = randomly_initialised_twin(model, 3)
    reference = randomly_initialised(model, 3).to(torch.bfloat16)
    if quantization != "none":
        reference = quantize_like(reference, model)
    drawn, expected = twin.state_dict(), reference.to("cuda:0").state_dict()
    assert drawn.keys() == expected.keys()
    for name, tensor in expected.items():
        assert drawn[name].device == torch.device("cuda:0"), name
        assert torch.equal(drawn[name], tensor), name
    assert len(quantized_modules(twin)) == (14 if quantization == "nf4" else 0)


def test_the_random_twin_follows_the_device_map_over_the_visible_gpus(tiny):
    """Each block of the twin lands on the GPU of the model's balanced device map."""
    folder = tiny[0]
    devices = [f"cuda:{index}" for index in range(torch.cuda.device_count())]
    plan = plan_placement(folder, "float32", devices, device_budgets(devices))
    plan = plan if isinstance(plan, dict) else {"": plan}
    twin = randomly_initialised_twin(load_model(folder, "float32", plan, "eager"), 0)
    for module, device in plan.items():
        placed = {p.device for p in twin.get_submodule(module).parameters()}
        assert placed == {torch.device(device)}, module
