"""What a model-running job needs, from a model's config alone, against hand arithmetic;
the statistics' memory against what the statistics really hold."""

import math

import polars as pl
import pytest
import torch
from transformers import LlamaConfig

from layerlaws.equilearning.costs import (
    class_sums_bytes,
    equilearning_pass_needs,
    fuzziness_bytes,
    statistics_bytes,
)
from layerlaws.equilearning.fuzziness import SeparationFuzziness, counted_classes
from layerlaws.equilearning.settings import FuzzinessSettings
from layerlaws.equilearning.statistics import EquilearningStatistics
from layerlaws.forward.costs import HOST_BASE_MB, ModelSize
from layerlaws.forward.model_pass import run_forward_pass
from layerlaws.models.loading import load_model, load_tokenizer
from layerlaws.models.preparation import prepare_model
from layerlaws.pipeline.planning import config_size, repeated_tokens
from layerlaws.text.tokens import tokenize_sentences

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


@pytest.mark.parametrize("classes_setting", ["all", "frequent"])
def test_the_fuzziness_statistics_hold_what_the_estimate_says(
    llama_folder, texts, tmp_path, classes_setting
):
    """The co-moments hold ``fuzziness_bytes``; the CPU statistics (open class sums,
    folded matrices, references) at no time more than ``class_sums_bytes`` of the classes
    of two rows or more, which the planner's count of the tokens table bounds, and once
    the pass is over, no class sums."""
    facts = prepare_model({"source": {"kind": "local", "path": str(llama_folder)}}, tmp_path / "m")
    sentences = pl.DataFrame({"sentence_id": range(20), "text": texts[:20], "source": "t"})
    tokens = tokenize_sentences(sentences, load_tokenizer(tmp_path / "m"), max_tokens=20)
    settings = FuzzinessSettings(classes=classes_setting, min_rows=3, max_classes=50)
    classes = counted_classes(tokens, settings)
    observer = SeparationFuzziness(facts, NORMS, classes)
    watched = HostWatch(observer)
    model = load_model(tmp_path / "m", "float32", "cpu")
    run_forward_pass(model, facts, tokens, [watched], 8, "cpu", progress=False)
    size = ModelSize(facts.parameters, facts.num_layers, facts.hidden_size, facts.vocab_size)
    held = sum(m.comoment.nbytes + m.mean.nbytes for m in observer.total.values())
    assert held == fuzziness_bytes(size, NORMS)
    assert watched.devices == {"cpu"}
    open_classes = classes.n_open_at_most
    assert class_sums_bytes(size, NORMS, 0) < watched.peak
    assert watched.peak <= class_sums_bytes(size, NORMS, open_classes)
    assert observer.held_sums == 0
    assert host_bytes(observer) == class_sums_bytes(size, NORMS, 0)
    tokens.write_parquet(tmp_path / "tokens.parquet")
    assert open_classes <= repeated_tokens(tmp_path / "tokens.parquet")


def cpu_tensors(observer: SeparationFuzziness) -> list[torch.Tensor]:
    """The separation fuzziness's host statistics: open class sums, folded matrices,
    references."""
    blocks = [block for sums in observer.open.values() for block in sums.blocks]
    return [*blocks, *observer.folded.values(), *observer.reference.values()]


def host_bytes(observer: SeparationFuzziness) -> int:
    return sum(tensor.nbytes for tensor in cpu_tensors(observer))


class HostWatch:
    """An observer passing everything to a SeparationFuzziness, recording the most host
    memory its statistics held after any layer, and their devices."""

    def __init__(self, observer: SeparationFuzziness) -> None:
        self.observer, self.peak, self.devices = observer, 0, set()

    def begin_batch(self, batch) -> None:
        self.observer.begin_batch(batch)

    def observe(self, layer: int, states: torch.Tensor) -> None:
        self.observer.observe(layer, states)
        self.peak = max(self.peak, host_bytes(self.observer))
        self.devices |= {tensor.device.type for tensor in cpu_tensors(self.observer)}
