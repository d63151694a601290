"""The expanded config and the job planner, built from a YAML file as a notebook user
would (no workflow)."""

import copy
import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from layerlaws.forward.kept_states import storage_dtype
from layerlaws.pipeline.expansion import ExpandedConfig
from layerlaws.pipeline.layout import Layout
from layerlaws.pipeline.planning import JobPlanner
from layerlaws.pipeline.resources import ModelSize

REPO = Path(__file__).resolve().parents[2]


def validated(name):
    config = yaml.safe_load((REPO / name).read_text())
    validate(config, str(REPO / "schemas/config.schema.yaml"))
    return config


def test_a_planner_sizes_a_revision_of_a_series_before_anything_runs(tmp_path):
    planner = JobPlanner.from_config(validated("configs/paper.yaml"), Layout(str(tmp_path)))
    size, sized_by = planner.size("pythia-1b@step1000")
    assert size == ModelSize(1011781632, 16, 2048, 50304) and sized_by == "config size"
    rows = [row for row in planner.plan() if row["model"] == "pythia-1b@step1000"]
    assert {row["job"] for row in rows} == {"equilearning_pass", "measure_coupling"}


def test_a_planner_reads_a_prepared_model_from_the_layout(tmp_path):
    layout = Layout(str(tmp_path / "out"))
    config = validated("configs/paper.yaml")
    planner = JobPlanner.from_config(config, layout)
    facts = {"parameters": 10, "num_layers": 2, "hidden_size": 4, "vocab_size": 8}
    Path(layout.model("gpt2")).mkdir(parents=True)
    Path(layout.model_facts("gpt2")).write_text(json.dumps(facts))
    assert planner.size("gpt2") == (ModelSize(10, 2, 4, 8), "prepared model")


def test_the_expanded_config_is_read_only_and_leaves_the_config_alone():
    config = validated("config.yaml")
    before = copy.deepcopy(config)
    expanded = ExpandedConfig.from_config(config)
    assert config == before
    assert expanded.runs[:2] == (("smollm2-135m", "wiki-science"), ("smollm2-135m", "wiki-culture"))
    assert ("wiki-llama@step800", "paper") in expanded.coupling_runs
    assert ("wiki-llama@step0", "wiki-train") in expanded.signature_runs
    assert [member.x for member in expanded.series["wiki-llama"]] == [0, 10, 50, 200, 800]
    source = expanded.models["wiki-llama@step50"]["source"]
    assert source["path"] == "results/training/wiki-llama/checkpoints/step_000050"
    assert expanded.step_zero_model("wiki-llama@step50") == "wiki-llama@step0"
    with pytest.raises(TypeError):
        expanded.models["other"] = {}
    with pytest.raises(TypeError):
        expanded.config["runs"] = []
    with pytest.raises(dataclasses.FrozenInstanceError):
        expanded.runs = ()


def test_kept_states_are_stored_in_the_compute_dtype_or_float32():
    assert storage_dtype("bfloat16", "compute") == "bfloat16"
    assert storage_dtype("bfloat16", "float32") == "float32"
