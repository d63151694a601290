"""What a model-running job needs, from a model's config alone, against hand arithmetic;
the statistics' memory against what the statistics really hold."""

import copy
import math
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest
import torch
import yaml
from snakemake.utils import validate
from tiny_models import WIDTH, save_tiny_model
from transformers import AutoConfig, LlamaConfig, T5EncoderModel

from layerlaws.core.settings import SCHEMA_FILE
from layerlaws.equilearning.costs import (
    class_sums_bytes,
    equilearning_pass_needs,
    fuzziness_bytes,
    slots_in_memory,
    spilled_sums_bytes,
    statistics_bytes,
)
from layerlaws.equilearning.fuzziness import SeparationFuzziness, counted_classes
from layerlaws.equilearning.scheduling import repeated_tokens
from layerlaws.equilearning.settings import FuzzinessSettings
from layerlaws.equilearning.statistics import EquilearningStatistics
from layerlaws.forward.costs import HOST_BASE_MB, SCRATCH_BYTES_PER_SECOND, ModelSize
from layerlaws.forward.model_pass import run_forward_pass
from layerlaws.models.loading import load_model, load_tokenizer
from layerlaws.models.preparation import prepare_model
from layerlaws.pipeline.layout import Layout
from layerlaws.pipeline.planning import JobPlanner, config_size
from layerlaws.text.tokens import tokenize_sentences

REPO = Path(__file__).resolve().parents[2]

OFFSETS, NORMS, CONTROLS = (
    [-1, 0, 1, 2],
    ["model", "standardize", "none"],
    ["none", "shuffled_vocab"],
)


@pytest.fixture
def llama_13b(tmp_path):
    """A 13B Llama's config (Llama-2-13B's sizes), no weights."""
    config = LlamaConfig(
        hidden_size=5120,
        intermediate_size=13824,
        num_hidden_layers=40,
        num_attention_heads=40,
        vocab_size=32000,
    )
    config.save_pretrained(tmp_path / "llama-13b")
    return {"source": {"kind": "local", "path": str(tmp_path / "llama-13b")}}


def test_a_13b_model_is_sized_from_its_config_alone(llama_13b):
    size = config_size(llama_13b)
    assert size == ModelSize(13_015_864_320, 40, 5120, 32000)


@pytest.mark.parametrize("gpus", ["auto", 2])
def test_the_pass_of_a_13b_model_needs_what_hand_arithmetic_says(llama_13b, gpus):
    size = config_size(llama_13b)
    needs = equilearning_pass_needs(
        size=size,
        dtype="bfloat16",
        n_tokens=200 * 512,
        batch_tokens=8 * 512,
        offsets=OFFSETS,
        norms=NORMS,
        controls=CONTROLS,
        on_gpu=True,
        gpus=gpus,
        gpu_memory_gb=80,
        fuzziness_open_classes=1000,
    )
    width = 5120 + 4 * 2
    statistics = (40 * 3 + 1) * (1 + 3) * (width * width + width) * 8
    assert statistics == statistics_bytes(size, OFFSETS, NORMS, CONTROLS)
    fuzziness = (40 * 3 + 1) * (5120 * 5120 + 5120) * 8
    assert fuzziness == fuzziness_bytes(size, NORMS)
    class_sums = (40 * 3 + 1) * (1000 * 5120 + 5120 * 5120 + 5120) * 8
    assert class_sums == class_sums_bytes(size, NORMS, 1000)
    device = 13_015_864_320 * 2 + 8 * 512 * (40 + 1 + 24) * 5120 * 2 + statistics + fuzziness
    expected_gpus = math.ceil(device / (80 * 2**30 * 0.9)) if gpus == "auto" else gpus
    assert expected_gpus == (3 if gpus == "auto" else gpus)
    assert needs.gpu == expected_gpus
    assert needs.gpu_mb == math.ceil(device / expected_gpus / 2**20)
    host = HOST_BASE_MB * 2**20 + 5 * 2**30 + class_sums
    assert needs.mem_mb == math.ceil(host / 2**20)
    assert needs.disk_mb == 1 and needs.runtime >= 10


def test_a_pass_plans_its_class_sums_beyond_the_host_budget_as_scratch_disk(llama_13b):
    """A 13B Llama's pass with every one of its 32,000 next tokens open, 24 GiB of host
    memory for their sums: the host holds 24 GiB of them at most, 5,120-wide float64 sums
    an equal number per layer and norm; the rest, and at most a block (500 sums) more, is
    scratch disk, written and read once; the job's host memory within 64 GiB."""
    size = config_size(llama_13b)
    common = {
        "size": size,
        "dtype": "bfloat16",
        "n_tokens": 200 * 512,
        "batch_tokens": 8 * 512,
        "offsets": OFFSETS,
        "norms": NORMS,
        "controls": CONTROLS,
        "on_gpu": True,
        "gpus": 4,
        "gpu_memory_gb": 80,
        "fuzziness_open_classes": 32000,
    }
    budget = 24 * 2**30
    whole = equilearning_pass_needs(**common)
    needs = equilearning_pass_needs(**common, fuzziness_host_bytes=budget)
    held = budget // (121 * 5120 * 8)
    assert held == slots_in_memory(budget, 5120, 121) == 5199
    assert held * 121 * 5120 * 8 <= budget
    in_memory = class_sums_bytes(size, NORMS, held)
    assert needs.mem_mb == math.ceil((HOST_BASE_MB * 2**20 + 5 * 2**30 + in_memory) / 2**20)
    assert needs.mem_mb <= 64 * 1024 < whole.mem_mb
    scratch = 121 * (32000 - 5199 + 500 - 1) * 5120 * 8
    assert scratch == spilled_sums_bytes(size, NORMS, 32000, held)
    assert needs.scratch_mb == math.ceil(scratch / 2**20) and whole.scratch_mb == 0
    assert needs.disk_mb == 1 + needs.scratch_mb and needs.outputs_mb == 1
    io_minutes = 2 * (2 * scratch / SCRATCH_BYTES_PER_SECOND) / 60
    assert needs.runtime - whole.runtime == pytest.approx(io_minutes, abs=1)
    assert (needs.gpu, needs.gpu_mb) == (whole.gpu, whole.gpu_mb)


def test_the_statistics_hold_what_the_estimate_says(llama_folder, texts, tmp_path):
    facts = prepare_model({"source": {"kind": "local", "path": str(llama_folder)}}, tmp_path / "m")
    sentences = pl.DataFrame({"sentence_id": range(20), "text": texts[:20], "source": "t"})
    tokens = tokenize_sentences(sentences, load_tokenizer(tmp_path / "m"), max_tokens=20)
    statistics = EquilearningStatistics(facts, OFFSETS, NORMS, CONTROLS, 0)
    model = load_model(tmp_path / "m", "float32", "cpu")
    run_forward_pass(model, facts, tokens, [statistics], 8, "cpu", progress=False)
    held = sum(
        m.comoment.nbytes + m.mean.nbytes
        for m in [*statistics.total.values(), *statistics.lacking.values()]
    )
    size = ModelSize(facts.parameters, facts.num_layers, facts.hidden_size, facts.vocab_size)
    assert held == statistics_bytes(size, OFFSETS, NORMS, CONTROLS)


@pytest.mark.parametrize(
    ("classes_setting", "sums_per_layer_norm"), [("all", None), ("frequent", None), ("all", 2)]
)
def test_the_fuzziness_statistics_hold_what_the_estimate_says(
    llama_folder, texts, tmp_path, classes_setting, sums_per_layer_norm
):
    """The co-moments hold ``fuzziness_bytes``; the CPU statistics (open class sums,
    folded matrices, references) at no time more than ``class_sums_bytes`` of the classes
    of two rows or more, which the planner's count of the tokens table bounds, or, with
    host memory for ``sums_per_layer_norm`` open sums per layer and norm, of those, the
    others at no time more than the planner's scratch disk (``spilled_sums_bytes``); once
    the pass is over, no class sums."""
    facts = prepare_model({"source": {"kind": "local", "path": str(llama_folder)}}, tmp_path / "m")
    sentences = pl.DataFrame({"sentence_id": range(20), "text": texts[:20], "source": "t"})
    tokens = tokenize_sentences(sentences, load_tokenizer(tmp_path / "m"), max_tokens=20)
    settings = FuzzinessSettings(classes=classes_setting, min_rows=3, max_classes=50)
    classes = counted_classes(tokens, settings)
    layer_norms = facts.num_layers * len(NORMS) + 1
    budget = sums_per_layer_norm and sums_per_layer_norm * layer_norms * facts.hidden_size * 8
    observer = SeparationFuzziness(facts, NORMS, classes, host_bytes=budget)
    watched = HostWatch(observer)
    model = load_model(tmp_path / "m", "float32", "cpu")
    run_forward_pass(model, facts, tokens, [watched], 8, "cpu", progress=False)
    size = ModelSize(facts.parameters, facts.num_layers, facts.hidden_size, facts.vocab_size)
    held = sum(m.comoment.nbytes + m.mean.nbytes for m in observer.total.values())
    assert held == fuzziness_bytes(size, NORMS)
    assert watched.devices == {"cpu"}
    open_classes = classes.n_open_at_most
    held = slots_in_memory(budget, facts.hidden_size, layer_norms)
    assert class_sums_bytes(size, NORMS, 0) < watched.peak
    assert watched.peak <= class_sums_bytes(size, NORMS, min(open_classes, held or open_classes))
    assert observer.held_sums == 0
    assert host_bytes(observer) == class_sums_bytes(size, NORMS, 0)
    tokens.write_parquet(tmp_path / "tokens.parquet")
    planned = repeated_tokens(tmp_path / "tokens.parquet")
    assert open_classes <= planned
    assert watched.spilled_peak <= spilled_sums_bytes(size, NORMS, planned, held)
    assert (watched.spilled_peak > 0) == (budget is not None)


def cpu_tensors(observer: SeparationFuzziness) -> list[torch.Tensor]:
    """The separation fuzziness's host statistics: open class sums (not those spilled to
    disk), folded matrices, references."""
    blocks = [block for sums in observer.open.values() for block in sums.blocks[: sums.in_memory]]
    return [*blocks, *observer.folded.values(), *observer.reference.values()]


def spilled_bytes(observer: SeparationFuzziness) -> int:
    """Open class sums held in spill files."""
    blocks = [block for sums in observer.open.values() for block in sums.blocks[sums.in_memory :]]
    return sum(block.nbytes for block in blocks)


def host_bytes(observer: SeparationFuzziness) -> int:
    return sum(tensor.nbytes for tensor in cpu_tensors(observer))


class HostWatch:
    """An observer passing everything to a SeparationFuzziness, recording the most host
    memory its statistics held after any layer, the most of its spill files, and their
    devices."""

    def __init__(self, observer: SeparationFuzziness) -> None:
        self.observer, self.peak, self.devices = observer, 0, set()
        self.spilled_peak = 0

    def begin_batch(self, batch) -> None:
        self.observer.begin_batch(batch)

    def observe(self, layer: int, states: torch.Tensor) -> None:
        self.observer.observe(layer, states)
        self.peak = max(self.peak, host_bytes(self.observer))
        self.spilled_peak = max(self.spilled_peak, spilled_bytes(self.observer))
        self.devices |= {tensor.device.type for tensor in cpu_tensors(self.observer)}


# An encoder-decoder's pass is planned for what it runs and regresses (He & Su's released
# code, equilearning.encoder_decoder: one_stack): next-token probing the encoder alone,
# span corruption the whole model with its decoder's layers.


def t5_encoder_parameters(d: int, heads: int, d_kv: int, d_ff: int, blocks: int, vocab: int) -> int:
    """T5's encoder (Raffel et al. 2020, §2.1) by its layer shapes: the shared embeddings
    V·d; per block the attention's q, k, v, o (4·d·h·d_kv), the ReLU feed-forward's wi and
    wo (2·d·d_ff) and two RMSNorm weights (2·d); the first block's 32 relative-position
    buckets per head; the final norm."""
    return vocab * d + blocks * (4 * d * heads * d_kv + 2 * d * d_ff + 2 * d) + 32 * heads + d


def t5_parameters(*shape: int, decoder_blocks: int | None = None) -> int:
    """The whole T5 of tied embeddings: its encoder (``shape`` as above) and a decoder of
    ``decoder_blocks`` (as many as the encoder's unless given), each with cross-attention
    (4·d·h·d_kv more) and a third norm, its first block's buckets and its final norm."""
    d, heads, d_kv, d_ff, blocks, _ = shape
    per_block = 8 * d * heads * d_kv + 2 * d * d_ff + 3 * d
    decoder = (decoder_blocks or blocks) * per_block + 32 * heads + d
    return t5_encoder_parameters(*shape) + decoder


PUBLISHED_T5 = {
    "t5-base": (768, 12, 64, 3072, 12),
    "t5-large": (1024, 16, 64, 4096, 24),
    "t5-3b": (1024, 32, 128, 16384, 24),
    "t5-11b": (1024, 128, 128, 65536, 24),
}
"""google-t5/<key>'s config.json: d_model, num_heads, d_kv, d_ff, num_layers (of each
stack); vocab_size 32128."""


def paper_config() -> dict:
    config = yaml.safe_load((REPO / "configs/paper.yaml").read_text())
    validate(config, str(SCHEMA_FILE))
    return config


def test_the_paper_configs_t5_sizes_are_their_published_configs():
    models = paper_config()["models"]
    for key, shape in PUBLISHED_T5.items():
        expected = {
            "parameters": t5_parameters(*shape, 32128),
            "num_layers": 2 * shape[-1],
            "hidden_size": shape[0],
            "vocab_size": 32128,
            "decoder_layers": shape[-1],
            "encoder_parameters": t5_encoder_parameters(*shape, 32128),
        }
        assert models[key]["size"] == models[f"{key}-ntp"]["size"] == expected


def pass_needs(planner: JobPlanner, model: str, dataset: str):
    """The planner's needs of the pass of ``model`` on ``dataset`` before anything runs."""
    layout = planner.layout
    return planner.needs("equilearning_pass")(
        SimpleNamespace(model=model, dataset=dataset),
        SimpleNamespace(model=layout.model(model), tokens=layout.tokens(model, dataset)),
    )


def alone(config: dict, size: ModelSize, dataset: str, on_gpu: bool = True):
    """``equilearning_pass_needs`` of a model of ``size`` in float32, on ``dataset``'s bound
    of tokens of the config (n_samples × max_tokens, batches of batch_size texts)."""
    settings, data = config["equilearning"], config["datasets"][dataset]
    assert settings["shards"] == 1 and settings["fuzziness"]["classes"] == "all"
    tokens = data["n_samples"] * data["max_tokens"]
    return equilearning_pass_needs(
        size=size,
        dtype="float32",
        n_tokens=tokens,
        batch_tokens=config["execution"]["batch_size"] * data["max_tokens"],
        offsets=settings["offsets"],
        norms=settings["norms"],
        controls=settings["controls"],
        on_gpu=on_gpu,
        gpus="auto",
        gpu_memory_gb=config["execution"]["gpu_memory_gb"],
        fuzziness_open_classes=min(tokens // 2, size.vocab_size),
        fuzziness_host_bytes=int(config["execution"]["fuzziness_host_gb"] * 2**30),
    )


def test_a_prepared_t5_records_its_stacks_and_its_next_token_pass_runs_the_encoder(
    tmp_path, tokenizer
):
    """The prepared facts (and a size read from the config alone) count T5EncoderModel's
    parameters, as the formula above does; the planner reads them and plans the next-token
    pass as the encoder's 3 blocks and parameters, the span-corruption pass as the
    decoder's 2 blocks and the whole model's parameters (on the CPU, where the host holds
    weights and statistics)."""
    source = save_tiny_model(tmp_path / "source", "t5", tokenizer, num_hidden_layers=3)
    config = AutoConfig.from_pretrained(source)
    encoder = sum(parameter.numel() for parameter in T5EncoderModel(config).parameters())
    shape = (config.d_model, config.num_heads, config.d_kv, config.d_ff, 3, config.vocab_size)
    assert config.num_decoder_layers == 2 and encoder == t5_encoder_parameters(*shape)
    paper = paper_config()
    paper["execution"]["device"] = "cpu"
    layout = Layout(str(tmp_path / "out"))
    model_config = {"source": {"kind": "local", "path": str(source)}}
    for model in ("t5-base-ntp", "t5-base"):
        facts = prepare_model(model_config, layout.model(model))
    assert (facts.num_layers, facts.decoder_layers) == (5, 2)
    assert (
        facts.encoder_parameters
        == encoder
        < facts.parameters
        == t5_parameters(*shape, decoder_blocks=2)
    )
    whole = ModelSize(facts.parameters, 5, WIDTH, config.vocab_size)
    from_config = config_size(model_config)
    assert (from_config, from_config.decoder_layers, from_config.encoder_parameters) == (
        whole,
        2,
        encoder,
    )
    planner = JobPlanner.from_config(paper, layout)
    next_token = pass_needs(planner, "t5-base-ntp", "c4")
    encoder_size = ModelSize(encoder, 3, WIDTH, config.vocab_size)
    assert next_token == alone(paper, encoder_size, "c4", on_gpu=False)
    assert next_token.mem_mb < alone(paper, whole, "c4", on_gpu=False).mem_mb
    decoder_size = ModelSize(facts.parameters, 2, WIDTH, config.vocab_size)
    assert pass_needs(planner, "t5-base", "c4-sc") == alone(paper, decoder_size, "c4-sc", False)


def test_t5_11b_next_token_pass_plans_the_encoder_on_one_gpu_of_48_gb(tmp_path):
    """t5-11b sized by the paper config: its next-token pass in float32 is the encoder's
    24 blocks and 4.86e9 parameters, one 48 GB GPU where the whole model's 48 blocks and
    1.13e10 parameters (45 GB of weights) take two; its span-corruption pass keeps the
    whole model's parameters with the decoder's 24 blocks. Under encoder_then_decoder, or
    from a size that does not say how the stacks divide, both passes are the whole
    model's."""
    config = paper_config()
    whole = ModelSize(11307321344, 48, 1024, 32128)
    next_token, span = ("t5-11b-ntp", "c4"), ("t5-11b", "c4-sc")
    planner = JobPlanner.from_config(config, Layout(str(tmp_path)))
    needs = pass_needs(planner, *next_token)
    assert needs == alone(config, ModelSize(4864791552, 24, 1024, 32128), "c4")
    assert (needs.gpu, alone(config, whole, "c4").gpu) == (1, 2)
    assert pass_needs(planner, *span) == alone(
        config, ModelSize(11307321344, 24, 1024, 32128), "c4-sc"
    )
    both = copy.deepcopy(config)
    both["equilearning"]["encoder_decoder"] = "encoder_then_decoder"
    undivided = copy.deepcopy(config)
    for model in ("t5-11b", "t5-11b-ntp"):
        undivided["models"][model]["size"] = copy.deepcopy(config["models"][model]["size"])
        del undivided["models"][model]["size"]["decoder_layers"]
        del undivided["models"][model]["size"]["encoder_parameters"]
    for changed in (both, undivided):
        planner = JobPlanner.from_config(changed, Layout(str(tmp_path)))
        for model, dataset in (next_token, span):
            assert pass_needs(planner, model, dataset) == alone(config, whole, dataset)


def test_every_pass_of_the_paper_config_is_planned_within_64_gib_of_host_memory(tmp_path):
    """Before anything is tokenised (the open classes bounded by the vocabulary), every
    equi-learning pass of configs/paper.yaml plans at most 64 GiB of host memory (a GPU
    node's share per job), those whose open class sums do not fit planning them as
    scratch disk, outside their outputs."""
    rows = JobPlanner.from_config(paper_config(), Layout(str(tmp_path))).plan()
    passes = [row for row in rows if row["job"] == "equilearning_pass"]
    assert len(passes) > 100
    assert max(row["mem_mb"] for row in passes) <= 64 * 1024
    spilling = [row for row in passes if row["scratch_mb"] > 0]
    assert any(row["model"] == "llama3-8b" and row["data"] == "bookcorpus" for row in spilling)
    assert all(row["disk_mb"] - row["scratch_mb"] == 1 for row in spilling)
