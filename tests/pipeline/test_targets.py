"""The targets and rule inputs of an expanded config under a layout."""

from pathlib import Path

import yaml
from snakemake.utils import validate

from layerlaws.core.settings import SCHEMA_FILE
from layerlaws.pipeline.expansion import ExpandedConfig
from layerlaws.pipeline.layout import Layout
from layerlaws.pipeline.targets import Targets

REPO = Path(__file__).resolve().parents[2]


def targets(root="results", own_corpus_counts=None):
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    if own_corpus_counts is not None:
        config["signatures"]["own_corpus_counts"] = own_corpus_counts
    validate(config, str(SCHEMA_FILE))
    return Targets(ExpandedConfig.from_config(config, Layout(root)), Layout(root), "svg")


def test_a_series_summary_reads_each_member_files_by_name():
    plan = targets()
    members = plan.series_summary_members("wiki-llama")
    inputs = plan.series_inputs("wiki-llama")
    assert [member["model"] for member in members][:2] == ["wiki-llama@step0", "wiki-llama@step10"]
    first = members[0]
    assert inputs[first["facts"]] == "results/models/wiki-llama@step0"
    assert inputs[first["law"]["wiki-culture"]] == (
        "results/equilearning/wiki-llama@step0/wiki-culture/law.csv"
    )
    assert inputs[first["trajectories"]] == (
        "results/coupling/wiki-llama@step0/paper/trajectories/tokens.csv"
    )
    assert inputs[first["rcos"]] == "results/signatures/wiki-llama@step0/wiki-train/rcos.csv"
    named = {name for member in members for name in (member["facts"], member["rcos"])}
    assert named <= set(inputs)


def test_every_target_lies_under_the_layout_root():
    outputs = targets("elsewhere").final_outputs()
    assert all(path.startswith("elsewhere/") for path in outputs)
    assert "elsewhere/coupling/smollm2-135m/paper/trajectories/pca.svg" in outputs
    assert "elsewhere/training/wiki-llama/checkpoints.csv" in outputs


def test_a_checkpoint_on_its_own_training_corpus_reads_the_trained_tokens_counts():
    """wiki-llama trained on wiki-train: its checkpoints' counts there are those of the
    sequences the training read (the default, trained); on another corpus, and under
    own_corpus_counts: source, the corpus's counts by the tokenizer's owner."""
    trained, source = targets(), targets(own_corpus_counts="source")
    own = "results/training/wiki-llama/counts/unigrams.parquet"
    tokenizer_owner = "results/signatures/smollm2-135m/wiki-train/unigrams.parquet"
    assert trained.counts("wiki-llama@step200", "wiki-train", "unigrams") == own
    assert source.counts("wiki-llama@step200", "wiki-train", "unigrams") == tokenizer_owner
    assert trained.counts("wiki-llama@step200", "wiki-science", "unigrams") == (
        "results/signatures/smollm2-135m/wiki-science/unigrams.parquet"
    )
    assert trained.counts("smollm2-135m", "wiki-train", "unigrams") == tokenizer_owner
