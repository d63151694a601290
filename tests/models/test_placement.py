"""Models spread over several devices: the plan (on fake GPU budgets) and the loading of a
planned device map, exercised on the CPU."""

import pytest
import torch
from transformers import AutoConfig

from layerlaws.core.errors import LayerlawsError
from layerlaws.equilearning.statistics import EquilearningStatistics
from layerlaws.forward.model_pass import run_forward_pass
from layerlaws.models.loading import load_model, load_tokenizer, plan_placement
from layerlaws.models.placement import device_map, weights_bytes
from layerlaws.models.preparation import prepare_model, skeleton_of
from layerlaws.text.tokens import tokenize_sentences


@pytest.fixture
def prepared(llama_folder, tmp_path):
    return prepare_model({"source": {"kind": "local", "path": str(llama_folder)}}, tmp_path / "m")


def test_a_model_is_spread_over_two_devices_whole_blocks_each(llama_folder):
    skeleton = skeleton_of(AutoConfig.from_pretrained(llama_folder), False)
    total = weights_bytes(skeleton, torch.float32)
    plan = device_map(skeleton, torch.float32, {"cuda:0": total * 0.6, "cuda:1": total * 0.6})
    blocks = {name: device for name, device in plan.items() if name.startswith("model.layers.")}
    assert sorted(blocks) == [f"model.layers.{index}" for index in range(4)], "a block was split"
    order = [blocks[f"model.layers.{index}"] for index in range(4)]
    assert order == sorted(order) and set(order) == {"cuda:0", "cuda:1"}
    assert plan["model.embed_tokens"] == plan["lm_head"] == "cuda:0"
    for device, budget in (("cuda:0", total * 0.6), ("cuda:1", total * 0.6)):
        placed = sum(
            parameter.numel() * 4
            for name, parameter in skeleton.named_parameters()
            if any(name.startswith(module + ".") for module, d in plan.items() if d == device)
        )
        assert 0 < placed <= budget
    with pytest.raises(LayerlawsError, match="does not fit the 2 device"):
        device_map(skeleton, torch.float32, {"cuda:0": total * 0.3, "cuda:1": total * 0.3})


def test_a_planned_device_map_loads_and_measures_like_one_device(prepared, texts, tmp_path):
    folder = tmp_path / "m"
    budgets = {"cuda:0": 10**5, "cuda:1": 10**9}
    plan = plan_placement(folder, "float32", list(budgets), budgets)
    assert set(plan.values()) == {"cuda:0", "cuda:1"}
    on_cpu = {name: "cpu" for name in plan}
    sentences = {"sentence_id": list(range(30)), "text": texts[:30], "source": ["t"] * 30}
    import polars as pl

    tokens = tokenize_sentences(pl.DataFrame(sentences), load_tokenizer(folder), max_tokens=20)
    tables = []
    for placement in (on_cpu, "cpu"):
        model = load_model(folder, "float32", placement)
        statistics = EquilearningStatistics(prepared, [1], ["model"], ["none"], 0)
        run_forward_pass(model, prepared, tokens, [statistics], 8, "cpu", progress=False)
        tables.append(statistics.table())
    assert tables[0].equals(tables[1])
    assert plan_placement(folder, "float32", ["cpu"]) == "cpu"
