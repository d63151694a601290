"""The expanded config and the job planner, built from a YAML file as a notebook user
would (no workflow)."""

import copy
import dataclasses
import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
import yaml
from observer_example import EXAMPLE, write_example
from snakemake.utils import validate
from snakemake_runs import snakemake, write_config

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.settings import SCHEMA_FILE
from layerlaws.coupling.scheduling import job_needs as coupling_job_needs
from layerlaws.forward.costs import ModelSize
from layerlaws.forward.kept_states import storage_dtype
from layerlaws.geometry.costs import accumulator_bytes
from layerlaws.geometry.observer import GeometryObserver
from layerlaws.geometry.settings import GeometrySettings
from layerlaws.pipeline.expansion import ExpandedConfig
from layerlaws.pipeline.layout import Layout
from layerlaws.pipeline.planning import JobPlanner, gpu_hours_line, runtime_overruns
from layerlaws.pipeline.preflight import training_fit_problems
from layerlaws.training.plan import TrainingSpec, segment_ends
from layerlaws.training.scheduling import training_tokens

REPO = Path(__file__).resolve().parents[2]


def validated(name):
    config = yaml.safe_load((REPO / name).read_text())
    validate(config, str(SCHEMA_FILE))
    return config


def test_a_planner_sizes_a_revision_of_a_series_before_anything_runs(tmp_path):
    planner = JobPlanner.from_config(validated("configs/paper.yaml"), Layout(str(tmp_path)))
    size, sized_by = planner.size("pythia-1b@step1000")
    assert size == ModelSize(1011781632, 16, 2048, 50304) and sized_by == "config size"
    rows = [row for row in planner.plan() if row["model"] == "pythia-1b@step1000"]
    assert {row["job"] for row in rows} == {"equilearning_pass", "measure_coupling"}


def test_every_coupling_job_of_the_paper_config_fits_a_nodes_share_of_host_memory(tmp_path):
    """The random twin is drawn a block at a time (``coupling.costs.twin_host_bytes``):
    no coupling job of the paper config, Llama-3-70B's included, plans more than 64 GiB of
    host memory (Llama-3-70B's whole float32 twin alone took 263 GiB)."""
    planner = JobPlanner.from_config(validated("configs/paper.yaml"), Layout(str(tmp_path)))
    rows = [row for row in planner.plan() if row["job"].startswith("measure_coupling")]
    assert len(rows) > 100 and "llama3-70b" in {row["model"] for row in rows}
    over = [(row["model"], row["mem_mb"]) for row in rows if row["mem_mb"] > 64 * 1024]
    assert not over


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


SMOLLM2 = {"parameters": 134_515_008, "num_layers": 30, "hidden_size": 576, "vocab_size": 49152}
"""SmolLM2-135M's sizes, as its prepared facts say."""


def test_the_pass_memory_grows_with_the_fuzziness_classes(tmp_path):
    """Host memory of an equi-learning pass: the open class sums of the separation
    fuzziness, (30 layers × 3 norms + 1) × classes × 576 × 8 bytes, with classes the ids
    repeated among the text tokens of the tokens table (before it exists, min(tokens // 2,
    vocabulary)); under ``classes: frequent`` max_classes whatever the table."""
    config = validated("config.yaml")
    layout = Layout(str(tmp_path))
    Path(layout.model("smollm2-135m")).mkdir(parents=True)
    Path(layout.model_facts("smollm2-135m")).write_text(json.dumps(SMOLLM2))
    wildcards = SimpleNamespace(model="smollm2-135m", dataset="wiki-science")
    tokens = Path(layout.tokens("smollm2-135m", "wiki-science"))
    inputs = SimpleNamespace(model=layout.model("smollm2-135m"), tokens=tokens)
    position = np.arange(6000) % 100
    special = position == 0

    def token_ids(distinct: int) -> np.ndarray:
        """60 sequences of 100 tokens, a special one (id 40000) first."""
        return np.where(special, 40000, np.arange(6000) % distinct)

    def repeated(distinct: int) -> int:
        return int((np.bincount(token_ids(distinct)[~special]) >= 2).sum())

    def host_mb(classes_setting: str, distinct: int | None) -> int:
        if distinct is not None:
            tokens.parent.mkdir(parents=True, exist_ok=True)
            pl.DataFrame(
                {
                    "sentence_id": np.arange(6000) // 100,
                    "position": position,
                    "token_id": token_ids(distinct),
                    "is_special": special,
                }
            ).write_parquet(tokens)
        changed = copy.deepcopy(config)
        changed["equilearning"]["fuzziness"]["classes"] = classes_setting
        return (
            JobPlanner.from_config(changed, layout)
            .needs("equilearning_pass")(wildcards, inputs)
            .mem_mb
        )

    def class_sums_mb(classes: int) -> float:
        return (30 * 3 + 1) * classes * 576 * 8 / 2**20

    assert 0 < repeated(100) < repeated(2500) < 2500
    before = host_mb("all", None)
    few, many = host_mb("all", 100), host_mb("all", 2500)
    assert many - few == pytest.approx(class_sums_mb(repeated(2500) - repeated(100)), abs=1)
    assert before - few == pytest.approx(class_sums_mb(200 * 128 // 2 - repeated(100)), abs=1)
    for distinct in (100, 2500):
        expected = few + class_sums_mb(1000 - repeated(100))
        assert host_mb("frequent", distinct) == pytest.approx(expected, abs=1)


def test_a_pass_plans_what_its_named_observers_declare(tmp_path, monkeypatch):
    """``equilearning.observers`` adds to a pass's GPU memory what each observer declares
    (the geometry's from its torch-free costs, the docs' example's float64 copy of a
    layer's batch states), for batches of 16 texts of 128 tokens, and to its runtime on a
    CPU their float64 work; entries whose ``models`` do not name the model add nothing."""
    write_example(tmp_path)
    monkeypatch.chdir(tmp_path)
    config = validated("config.yaml")
    layout = Layout(str(tmp_path / "results"))
    Path(layout.model("smollm2-135m")).mkdir(parents=True)
    Path(layout.model_facts("smollm2-135m")).write_text(json.dumps(SMOLLM2))
    wildcards = SimpleNamespace(model="smollm2-135m", dataset="wiki-science")
    inputs = SimpleNamespace(
        model=layout.model("smollm2-135m"), tokens=layout.tokens("smollm2-135m", "wiki-science")
    )

    def planned(observers, device="auto"):
        changed = copy.deepcopy(config)
        changed["equilearning"]["observers"] = observers
        changed["execution"]["device"] = device
        return JobPlanner.from_config(changed, layout).needs("equilearning_pass")(wildcards, inputs)

    example = {"name": "mean_norm", "class": f"{EXAMPLE}:MeanNorm"}
    bare, geometry = planned([]), planned(["geometry"])
    both = planned(["geometry", example])
    elsewhere = planned(
        [{"name": "geometry", "models": ["wiki-llama"]}, {**example, "models": ["wiki-llama"]}]
    )
    batch_tokens, width = 16 * 128, SMOLLM2["hidden_size"]
    declared = GeometryObserver.bytes_on_device(
        GeometrySettings(),
        hidden_size=width,
        num_layers=SMOLLM2["num_layers"],
        batch_tokens=batch_tokens,
        dtype_bytes=4,
        tokens_per_text=128,
    )
    assert declared > accumulator_bytes(GeometrySettings(), hidden_size=width, num_layers=30)
    assert geometry.gpu_mb - bare.gpu_mb == pytest.approx(declared / 2**20, abs=1)
    assert both.gpu_mb - geometry.gpu_mb == pytest.approx(8 * batch_tokens * width / 2**20, abs=1)
    assert planned(["geometry"], "cpu").runtime > planned([], "cpu").runtime
    assert elsewhere == bare


def test_a_sharded_plan_names_the_shard_rules_that_run_the_work(tmp_path):
    """With passes and couplings in two shards, the plan's rows are the shards' jobs, each
    checked against its shard rule's partition (the merges run on the CPU, elsewhere), the
    advice names the shard rule and more shards, and the couplings' GPU-hours count the
    coupling shards."""
    config = validated("configs/paper.yaml")
    config["equilearning"]["shards"] = config["coupling"]["shards"] = 2
    config["execution"] |= {"partition_runtime_limits": {"gpu": 200}}
    planner = JobPlanner.from_config(config, Layout(str(tmp_path)))
    rows = planner.plan()
    jobs = {"equilearning_pass_shard", "measure_coupling_shard", "train_checkpoint"}
    assert {row["job"] for row in rows} == jobs
    partitions = dict.fromkeys(jobs, "gpu") | {"equilearning_pass": "debug"}
    lines = runtime_overruns(rows, partitions, planner.execution)
    late = next(row for row in rows if row["model"] == "llama3-70b")
    assert late["job"] == "measure_coupling_shard" and late["runtime"] > 200
    assert any(
        line.startswith("measure_coupling_shard llama3-70b x leaderboard[0/2]: ")
        and "or more coupling.shards" in line
        for line in lines
    ), lines
    assert any("set-resources: measure_coupling_shard: runtime: 200" in line for line in lines)
    coupling = re.search(r"coupling_gpu_hours=([\d,.]+)", gpu_hours_line(rows, 8))[1]
    assert float(coupling.replace(",", "")) > 100


def test_the_estimate_names_every_job_longer_than_its_partition_allows(tmp_path):
    """The paper's couplings of 70B models run for more than the 200 minutes of a short
    partition: each is named with its planned
    minutes, the limit and what to change, the rule once with how to split its jobs into
    submissions that resume from the progress saves; a rule without a partition with a
    limit is named as unchecked, and without limits nothing is checked."""
    config = validated("configs/paper.yaml")
    limits = {"gpu": 200, "long": 100_000}
    config["execution"] |= {"partition_runtime_limits": limits, "checkpoint_minutes": 15}
    planner = JobPlanner.from_config(config, Layout(str(tmp_path)))
    rows = planner.plan()
    partitions = {
        "equilearning_pass": "long",
        "measure_coupling": "gpu",
        "train_checkpoint": "debug",
    }
    lines = runtime_overruns(rows, partitions, planner.execution)
    late = [row for row in rows if row["job"] != "train_checkpoint" and row["runtime"] > 200]
    # The passes' partition allows them; only couplings run past theirs.
    assert {row["job"] for row in late} == {"measure_coupling", "equilearning_pass"}
    late = [row for row in late if row["job"] == "measure_coupling"]
    assert len(lines) == len(late) + 2
    llama = next(row for row in late if row["model"] == "llama3-70b")
    submissions = -(-llama["runtime"] // 200)
    assert submissions >= 2
    assert (
        f"measure_coupling llama3-70b x leaderboard: planned {llama['runtime']} min, over the "
        f"200 min limit of partition gpu: plan fewer prompts (coupling.prompts.leaderboard) "
        f"or coupling.token_layers, move it to a partition with a longer limit, or split it "
        f"into at least {submissions} submissions (how: below)"
    ) in lines
    splitting = lines[-2]
    assert splitting.startswith("  measure_coupling on partition gpu: ")
    assert "set-resources: measure_coupling: runtime: 200" in splitting
    assert f"retries: {submissions - 1} or more" in splitting
    assert "every execution.checkpoint_minutes (15 min)" in splitting
    assert lines[-1] == (
        "runtimes not checked (no limit in execution.partition_runtime_limits): "
        "train_checkpoint (partition debug)"
    )
    unset = runtime_overruns(rows, {}, planner.execution)
    assert unset[-1].endswith("run `snakemake estimate` with the SLURM profile)")
    assert len(unset) == 1
    defaults = config | {"execution": {}}
    validate(defaults, str(SCHEMA_FILE))
    unchecked = JobPlanner.from_config(defaults, Layout(str(tmp_path)))
    assert runtime_overruns(rows, partitions, unchecked.execution) == []


@pytest.mark.slow
def test_snakemake_estimate_checks_the_partitions_of_the_slurm_profile(tmp_path):
    """`snakemake estimate --profile profiles/slurm` (the estimate is a local rule; the
    local executor runs it here, without SLURM) checks every job against the limit of the
    partition the profile sends its rule to."""
    config = yaml.safe_load((REPO / "configs/paper.yaml").read_text())
    config["execution"]["partition_runtime_limits"] = {"gpu": 200, "debug": 60}
    profile = ["--profile", str(REPO / "profiles/slurm"), "--executor", "local"]
    result = snakemake(tmp_path, "estimate", *profile, configfile=write_config(tmp_path, config))
    assert result.returncode == 0, result.stderr[-3000:]
    llama = "measure_coupling llama3-70b x leaderboard: planned [0-9]+ min, over the 200 min"
    assert re.search(f"^{llama} limit of partition gpu: ", result.stdout, re.M)
    assert "\n  measure_coupling on partition gpu: " in result.stdout
    assert "runtimes not checked" not in result.stdout


def test_families_that_keep_whole_sequence_products_are_planned_so(tmp_path):
    """A prepared model of a family whose row has ``whole_sequence_products`` (the column
    the Jacobian tests check by running every family) plans its coupling longer (T = 32
    times the products; the shorter job is at the 10-minute floor)."""
    planner = JobPlanner.from_config(validated("configs/paper.yaml"), Layout(str(tmp_path)))
    sizes = {
        kind: ModelSize(1_000_000_000, 16, 2048, 50304, kind) for kind in ("gpt_neox", "mamba")
    }
    needs = {
        kind: coupling_job_needs(planner, "gpt2", size, "leaderboard")
        for kind, size in sizes.items()
    }
    assert needs["mamba"].runtime > 4 * needs["gpt_neox"].runtime > 0


def test_a_training_s_gpu_memory_is_planned_from_its_micro_batch_size(tmp_path):
    """Qwen's 151,936 logits over 2,048 tokens make a pass of Yao & Xu's training planned
    at 70.5 GiB with 16 sequences: each sequence fewer is its three copies of the logits and
    its activations fewer (12 blocks of 4·512 + 4·12·64 + 3·1,024 float32 values a token).
    More than the 43.2 GiB a 48 GB GPU gives a job stops the plan and the preflight with
    the micro_batch_size that fits (9); on the CPU the GPU is not checked."""
    per_sequence = 3 * 2048 * 151_936 * 4 + 2048 * 12 * (4 * 512 + 4 * 12 * 64 + 3 * 1024) * 4

    def planner_with(micro, device="cuda"):
        config = validated("configs/paper.yaml")
        config["training"]["qwen-cc"]["micro_batch_size"] = micro
        config["execution"]["device"] = device
        return JobPlanner.from_config(config, Layout(str(tmp_path)))

    def planned_mb(planner):
        return next(row for row in planner.plan() if row["model"] == "qwen-cc")["gpu_mb"]

    mb = {micro: planned_mb(planner_with(micro)) for micro in (9, 4, 1)}
    assert mb[9] - mb[4] == pytest.approx(5 * per_sequence / 2**20, abs=1)
    assert mb[4] - mb[1] == pytest.approx(3 * per_sequence / 2**20, abs=1)
    assert mb[9] / 1024 == pytest.approx(40.9, abs=0.05)
    assert training_fit_problems(planner_with(9)) == []
    expected = (
        "config training.qwen-cc: a pass of 16 sequences of 2048 tokens (micro_batch_size) is "
        "planned at 70.5 GiB of GPU memory, more than the 43.2 GiB one GPU gives a job "
        "(execution.gpu_memory_gb: 48, 90% of it); set training.qwen-cc.micro_batch_size: 9 "
        "(planned 40.9 GiB)"
    )
    assert training_fit_problems(planner_with(None)) == [expected]  # batch_size: 16
    with pytest.raises(LayerlawsError) as raised:
        planner_with(None).plan()
    assert str(raised.value) == expected
    assert training_fit_problems(planner_with(None, device="cpu")) == []
    assert planned_mb(planner_with(None, device="cpu")) == 0


def test_a_training_is_planned_a_segment_at_a_time(tmp_path):
    """Each segment of a training is a row over its steps' share of the training's tokens
    (Pile-CC's 6.1e10 in segments of at most segment_steps steps), each of the paper's
    planned under the 2,880 minutes of a 48-hour partition, where Pile-CC's last segment
    without segment_steps is its whole training; a training's segments are one chain in
    the wall time."""
    config = validated("configs/paper.yaml")
    planner = JobPlanner.from_config(config, Layout(str(tmp_path)))
    rows = [row for row in planner.plan() if row["job"] == "train_checkpoint"]
    for training, settings in config["training"].items():
        ends = segment_ends(TrainingSpec.of(settings))
        ours = [row for row in rows if row["model"] == training]
        assert [row["data"] for row in ours] == [
            f"{settings['dataset']}[{index}/{len(ends)}]" for index in range(len(ends))
        ]
        per_step = training_tokens(planner, training) / settings["steps"]
        tokens = [row["tokens"] for row in ours]
        np.testing.assert_allclose(tokens, np.diff([0, *ends]) * per_step, atol=1)
        assert max(row["runtime"] for row in ours) < 2880, training
    cc = [row for row in rows if row["model"] == "qwen-cc"]
    assert len(cc) == 22  # 0, 1, 1,364, every 100,000 steps and the last
    config["training"]["qwen-cc"]["segment_steps"] = None
    whole = JobPlanner.from_config(config, Layout(str(tmp_path))).plan()
    last = [row for row in whole if row["model"] == "qwen-cc"][-1]
    assert last["data"] == "pile-cc[3/4]" and last["runtime"] > 40_000
    chain = [{"job": "train_checkpoint", "gpu": 1, "runtime": 60, "chain": "t"}] * 3
    assert gpu_hours_line(chain, 3) == "gpu_hours=3.0 coupling_gpu_hours=0.0 wall_hours_on=3:3.0"
    apart = [{key: row[key] for key in ("job", "gpu", "runtime")} for row in chain]
    assert gpu_hours_line(apart, 3) == "gpu_hours=3.0 coupling_gpu_hours=0.0 wall_hours_on=3:1.0"


def test_the_trainings_spread_over_the_gpus_of_a_node(tmp_path):
    """With `--resources gpu=8` (``training_gpus``) each training of the paper claims 8
    GPUs (gpus: auto, the largest divisor of batch_size 16 within 8): a segment's minutes
    beyond the 5 of its start are divided by 8 (the all-reduce hides in the backward pass),
    its memory per GPU is that of 2 sequences a pass, its host memory 8 processes'; Pile-CC's
    Qwen training, 788 GPU-hours in one chain of 788 hours, becomes a chain of about 100
    hours, and the plan's wall time on 8 GPUs falls from more than that chain to under 400
    hours. Under
    execution.device: cpu a training stays one process."""
    config = validated("configs/paper.yaml")
    one = JobPlanner.from_config(config, Layout(str(tmp_path))).plan()
    eight = JobPlanner.from_config(config, Layout(str(tmp_path)), training_gpus=8).plan()
    cc_one, cc_eight = ([row for row in rows if row["model"] == "qwen-cc"] for rows in (one, eight))
    assert {row["gpu"] for row in cc_one} == {1} and {row["gpu"] for row in cc_eight} == {8}
    for single, spread in zip(cc_one, cc_eight, strict=True):
        assert spread["runtime"] == max(10, -(-(single["runtime"] - 5) // 8) + 5)
        assert spread["gpu_mb"] < single["gpu_mb"]
        assert spread["mem_mb"] == pytest.approx(8 * single["mem_mb"], abs=8)
    hours = [sum(row["runtime"] for row in rows) / 60 for rows in (cc_one, cc_eight)]
    assert round(hours[0]) == 788 and 95 < hours[1] < 105
    assert 788 < 8 * hours[1] < 1.03 * 788  # GPU-hours: the segments' starts, 8 times
    walls = [
        float(gpu_hours_line(rows, 8).split(":")[-1].replace(",", "")) for rows in (one, eight)
    ]
    # One GPU a training: the wall time is at least Pile-CC's chain; 8: within 400 hours.
    assert walls[0] >= hours[0] and walls[1] <= 400
    config["execution"]["device"] = "cpu"
    on_cpu = JobPlanner.from_config(config, Layout(str(tmp_path)), training_gpus=8).plan()
    assert {row["gpu"] for row in on_cpu if row["job"] == "train_checkpoint"} == {0}
