"""The rehearsal's parts: the counts divided, the stand-ins read by the pipeline's own hub
code offline, and the benchmark files of a real Snakemake run read against the plan."""

from __future__ import annotations

import copy
import dataclasses
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.settings import with_defaults
from layerlaws.models.hub_files import HubFiles, HubFilesRecord, files_of_listing
from layerlaws.models.loading import load_model, load_tokenizer
from layerlaws.models.preparation import prepare_model
from layerlaws.rehearsal.counts import divided_counts, renamed_checkpoints
from layerlaws.rehearsal.report import job_uses
from layerlaws.rehearsal.standins import (
    LAYERS,
    STANDIN_FILES,
    WIDTH,
    WORDS_PER_TOKEN,
    hub_datasets,
    hub_family,
    hub_models,
    tokenizer_of,
    write_hub_dataset,
    write_hub_model,
)
from layerlaws.signatures.token_groups import group_token_ids
from layerlaws.text.sources import hub_sample

ROOT = Path(__file__).parents[2]
CONFIGS = [
    ROOT / "config.yaml",
    *(ROOT / "configs" / name for name in ("paper.yaml", "zoo.yaml", "your-own-model.yaml")),
]
PAPER = ROOT / "configs" / "paper.yaml"


def paper(factor: int) -> dict:
    config = yaml.safe_load(PAPER.read_text())
    config["rehearsal"] = {"divide_counts_by": factor}
    return with_defaults(config)


def test_factor_one_leaves_the_config_as_written():
    assert divided_counts(paper(1)) == paper(1)


def test_the_counts_are_divided_and_nothing_else():
    written, scaled = paper(1000), divided_counts(paper(1000))
    for key, dataset in written["datasets"].items():
        if isinstance(dataset["n_samples"], int):
            expected = max(1, math.ceil(dataset["n_samples"] / 1000))
            assert scaled["datasets"][key]["n_samples"] == expected, key
    leaderboard = scaled["coupling"]["prompts"]["leaderboard"]
    assert (leaderboard["n_from_dataset"], leaderboard["jacobian_prompts"]) == (1, 1)
    for key, training in scaled["training"].items():
        written_training = written["training"][key]
        if written_training["corpus"] == "source":  # a whole source: by the factor squared
            steps = max(math.ceil(written_training["steps"] / 1000**2), 4)  # ≥ 4 checkpoints
            segment_steps = math.ceil(written_training["segment_steps"] / 1000**2)
            assert training["segment_steps"] == segment_steps == 1, key
        else:
            steps = math.ceil(written_training["steps"] / 1000)
        assert training["steps"] == steps, key
        assert training["batch_size"] == training["micro_batch_size"] == 1, key
        assert training["steps"] % (training["epochs"] or 1) == 0
        assert 1 <= training["warmup_steps"] <= training["steps"]
        assert training["context"] == written["training"][key]["context"] == 2048
    synthetic = scaled["synthetic"]
    assert (synthetic["n_samples"], synthetic["epochs"], synthetic["snapshot_epoch"]) == (50, 1, 1)
    # Everything else as written: put the written counts back and compare the whole config.
    restored = copy.deepcopy(scaled)
    for key in restored["datasets"]:
        restored["datasets"][key]["n_samples"] = written["datasets"][key]["n_samples"]
    for key in restored["coupling"]["prompts"]:
        restored["coupling"]["prompts"][key] = written["coupling"]["prompts"][key]
    restored["training"] = written["training"]
    restored["synthetic"] = written["synthetic"]
    assert restored == written


def test_listed_checkpoints_are_divided_within_the_steps():
    config = paper(10)
    config["training"]["qwen-cc"] |= {
        "corpus": "sample",
        "steps": 400,
        "epochs": 4,
        "checkpoints": [0, 5, 40, 400],
    }
    training = divided_counts(config)["training"]["qwen-cc"]
    assert training["steps"] == 40
    assert training["checkpoints"] == [0, 1, 4, 40]


def test_the_checkpoints_the_figure_index_names_are_renamed_as_divided():
    """The n-th checkpoint of a training as written names the n-th after division, and its
    last the last, so that the rehearsal finds the figures of the final checkpoints."""
    config = paper(10)
    config["training"]["qwen-cc"] |= {
        "corpus": "sample",
        "steps": 400,
        "epochs": 4,
        "checkpoints": [0, 5, 40, 400],
    }
    renamed = renamed_checkpoints(config, divided_counts(config))
    cc = {old: new for old, new in renamed.items() if old.startswith("qwen-cc@")}
    assert cc == {
        "qwen-cc@step0": "qwen-cc@step0",
        "qwen-cc@step5": "qwen-cc@step1",
        "qwen-cc@step40": "qwen-cc@step4",
        "qwen-cc@step400": "qwen-cc@step40",
    }
    assert set(renamed.values()) > set(cc.values())


def test_a_whole_source_stand_in_holds_what_its_training_reads_once_not_twice():
    """A whole-source training reads every row of its stand-in, so the rows together hold
    its sequences 1.25 times over (and no more: longer rows made the rehearsal's trainings
    eight times as long, then twice), where a sampled training's sample holds them."""
    config = divided_counts(paper(1000))
    groups = {
        (group.split, group.where): group
        for dataset in hub_datasets(config)
        for group in dataset.groups.values()
    }
    for key, training in config["training"].items():
        assert training["corpus"] == "source", key
        source = config["datasets"][training["dataset"]]["source"]
        group = groups[source["split"], tuple(sorted(source["where"].items()))]
        sequences = training["steps"] * training["batch_size"] + training["held_out_sequences"]
        words = 1.25 * (sequences + 1) * (training["context"] + 1) * WORDS_PER_TOKEN
        assert words <= group.rows * group.words < words + group.rows, key


@pytest.mark.parametrize("path", CONFIGS, ids=[path.name for path in CONFIGS])
def test_every_hub_model_of_the_configs_has_a_stand_in_family(path):
    for model in hub_models(yaml.safe_load(path.read_text())):
        assert hub_family(model.model_id)


def test_an_unknown_hub_model_is_refused_with_the_table_to_extend():
    with pytest.raises(LayerlawsError, match="no stand-in family for hub model 'acme/brain'"):
        hub_family("acme/brain")


@pytest.fixture
def hub_home(tmp_path):
    """The Hugging Face home the tests read offline (tests/conftest.py), its rehearsal
    stand-ins removed after."""
    yield from _home_writing(
        "hub/models--rehearsal-test--pythia-tiny", "datasets/rehearsal-test___pile"
    )


def _home_writing(*folders: str):
    """The Hugging Face home the tests read offline (tests/conftest.py), yielded once
    ``folders`` (relative to it) are checked absent; removed after."""
    from huggingface_hub import constants

    home = Path(constants.HF_HUB_CACHE).parent
    written = [home / folder for folder in folders]
    assert not any(path.exists() for path in written)
    yield home
    for path in written:
        shutil.rmtree(path, ignore_errors=True)


CONFIG = {
    "models": {
        "pythia": {
            "source": {"kind": "hub", "id": "rehearsal-test/pythia-tiny"},
            "revisions": ["step0", "step8"],
        }
    },
    "datasets": {
        "pile-cc": {
            "source": {
                "kind": "hub",
                "name": "rehearsal-test/pile",
                "split": "train",
                "streaming": True,
                "where": {"meta.pile_set_name": "Pile-CC"},
            },
            "n_samples": 5,
        },
        "pile": {
            "source": {"kind": "hub", "name": "rehearsal-test/pile", "split": "validation"},
            "n_samples": 3,
        },
    },
    "training": {},
}


def test_stand_ins_are_read_by_the_pipeline_hub_code_offline(hub_home, tmp_path):
    texts = [f"the {number} word sentence of the test number {number} ." for number in range(50)]
    (model,) = hub_models(CONFIG)
    assert model.revisions == ("step0", "step8")
    write_hub_model(hub_home / "hub", model, texts)
    weights = []
    for revision in model.revisions:
        source = {"kind": "hub", "id": model.model_id, "revision": revision}
        facts = prepare_model({"source": source}, tmp_path / revision)
        assert (facts.model_type, facts.num_layers, facts.hidden_size) == (
            "gpt_neox",
            LAYERS,
            WIDTH,
        )
        loaded = load_model(tmp_path / revision, "float32", "cpu")
        weights.append(torch.cat([p.detach().flatten() for p in loaded.parameters()]).numpy())
    assert np.isfinite(weights[0]).all() and not np.array_equal(*weights)  # seeded per revision

    (dataset,) = hub_datasets(CONFIG)
    write_hub_dataset(hub_home / "datasets", dataset, texts)
    cc = hub_sample(CONFIG["datasets"]["pile-cc"]["source"], None, 0)
    assert len(cc) == 10  # twice the sample, all of the Pile-CC rows and none of the others
    validation = hub_sample(CONFIG["datasets"]["pile"]["source"], 100, 0)
    assert len(validation) == 8  # at least 8 rows per split
    assert all(text.startswith("the ") for text, _ in cc + validation)


def test_stand_in_tokenizers_spell_the_token_groups_as_one_token_each():
    """The paper config's DM Mathematics group (/a … /e, one Qwen2.5 token each) is one
    token each of the stand-ins' word-level tokenizers, which split it without them."""
    (group,) = paper(1000)["signatures"]["token_groups"].values()
    texts = [f"the {number} word sentence of the test number {number} ." for number in range(50)]
    where = "signatures.token_groups.dm-fractions.tokens"
    with pytest.raises(
        LayerlawsError, match="'/a' is not one token of this model's tokenizer but 2"
    ):
        group_token_ids(group["tokens"], tokenizer_of("qwen2", texts), where)
    tokenizer = tokenizer_of("qwen2", texts, group["tokens"])
    ids = group_token_ids(group["tokens"], tokenizer, where)
    assert [tokenizer.decode([token]) for token in ids] == group["tokens"]
    assert len(set(ids.tolist())) == 5 and min(ids) >= len(tokenizer_of("qwen2", texts))


def test_job_uses_read_the_last_line_of_real_jobs_logs(tmp_path):
    """Two jobs through ``run_logged`` (as every script of the workflow) that hold 200 MB
    (planned 1,000 MB) and 20 MB (planned 10 MB): ratios about 0.2 and above 2, worst
    first, from each log's last line; a job given no mem_mb, or killed before its last
    line, is left out."""
    jobs = {"big": (200, 1000), "small/one": (20, 10), "free": (1, None)}
    for job, (megabytes, planned) in jobs.items():
        resources = {} if planned is None else {"mem_mb": planned}
        hold = (
            "from layerlaws.core.logs import run_logged; "
            f"run_logged(lambda: b'x' * ({megabytes} * 10**6), {str(tmp_path / job)!r} + "
            f"'.log', {resources!r})"
        )
        subprocess.run([sys.executable, "-c", hold], check=True, capture_output=True)
    (tmp_path / "killed.log").write_text("2026-01-01 INFO layerlaws: forward pass: 1 of 9\n")
    small, big = job_uses(tmp_path)
    assert (small.job, big.job) == ("small/one", "big")
    assert (small.planned_mb, big.planned_mb) == (10, 1000)
    assert small.peak_mb > 20 and big.peak_mb - small.peak_mb == pytest.approx(180, abs=20)
    assert 0.2 <= big.ratio <= 1 and small.ratio == pytest.approx(small.peak_mb / 10)
    assert 0 <= big.seconds < 30
    assert "of host memory at peak" in (tmp_path / "free.log").read_text().splitlines()[-1]


@pytest.fixture
def recorded_home():
    """The Hugging Face home the tests read offline, its stand-ins of a repository
    without a tokenizer and of its tokenizer's repository removed after."""
    yield from _home_writing(
        "hub/models--rehearsal-test--gpt2-no-tokenizer", "hub/models--rehearsal-test--gpt2"
    )


def test_stand_ins_hold_exactly_the_recorded_files_and_borrow_a_tokenizer(recorded_home, tmp_path):
    """A repository recorded without a tokenizer and with sharded .bin weights is stood in
    with exactly those files (its listing reads back as the record); its preparation stops
    without a tokenizer source, and with one (another stand-in of its family) takes that
    tokenizer, which every job then reads from the prepared folder."""
    texts = [f"the {number} word sentence of the test number {number} ." for number in range(50)]
    source = {
        "kind": "hub",
        "id": "rehearsal-test/gpt2-no-tokenizer",
        "subfolder": "m/transformers",
    }
    tokenizer_source = {"kind": "hub", "id": "rehearsal-test/gpt2"}
    recorded = HubFiles(tokenizer=False, safetensors="none", bin="sharded")
    record_file = tmp_path / "hub_files.yaml"
    record_file.write_text(
        yaml.safe_dump(
            {
                "repositories": [
                    {"ids": [source["id"]], "subfolders": ["*"], "basis": "a test",
                     **dataclasses.asdict(recorded)},
                    {"ids": [tokenizer_source["id"]], "basis": "a test",
                     **dataclasses.asdict(STANDIN_FILES)},
                ]
            }
        )
    )  # fmt: skip
    config = {"models": {"c4": {"source": source, "tokenizer": tokenizer_source}}}
    record = HubFilesRecord.read(record_file)
    models = hub_models(config)
    assert [model.model_id for model in models] == [tokenizer_source["id"], source["id"]]
    for model in models:
        write_hub_model(recorded_home / "hub", model, texts, record=record)
    snapshot = recorded_home / "hub" / "models--rehearsal-test--gpt2-no-tokenizer" / "snapshots"
    (root,) = snapshot.iterdir()
    listing = [str(path.relative_to(root)) for path in root.rglob("*") if path.is_file()]
    assert files_of_listing(listing, source["subfolder"]) == recorded
    assert sum(name.endswith(".bin") for name in listing) > 1
    with pytest.raises(LayerlawsError, match="has no usable tokenizer"):
        prepare_model({"source": source}, tmp_path / "alone")
    prepare_model({"source": source, "tokenizer": tokenizer_source}, tmp_path / "borrowed")
    tokenizer = load_tokenizer(tmp_path / "borrowed")
    model = load_model(tmp_path / "borrowed", "float32", "cpu")
    ids = tokenizer(texts[3], return_tensors="pt")["input_ids"]
    assert len(tokenizer) > 50 and ids.shape[1] >= len(texts[3].split())
    assert tokenizer.unk_token_id not in ids[0].tolist()
    assert model(ids).logits.shape == (1, ids.shape[1], model.config.vocab_size)
