"""What making some outputs takes (layerlaws.pipeline.target_plan): a dry run's jobs read
from what Snakemake prints, and the GPU-hours of the model jobs among them under a plan;
a job the plan should hold but does not is an error, as is a list that is not the job
stats' count. The real dry runs of the paper config: tests/pipeline/test_figure_index.py."""

from __future__ import annotations

import pytest
import yaml
from snakemake_runs import REPO

from layerlaws.core.errors import LayerlawsError
from layerlaws.pipeline.layout import Layout
from layerlaws.pipeline.planning import JobPlanner
from layerlaws.pipeline.target_plan import (
    DryRunJob,
    TargetPlan,
    listed_jobs,
    read_config,
    target_plan,
    target_plans,
)
from tests.pipeline.test_torch_free import assert_torch_free

PRINTED = """\
Building DAG of jobs...
Job stats:
job                  count
-----------------  -------
download_model           1
equilearning_pass        2
total                    3


[Sun Nov 29 03:25:42 2026]
rule download_model:
    output: results/downloads/pythia-1b@step8.json
    jobid: 2
    wildcards: model=pythia-1b@step8
    resources: tmpdir=/tmp
Shell command: None

[Sun Nov 29 03:25:42 2026]
rule equilearning_pass:
    input: results/tokens/gpt1/bookcorpus.parquet, results/models/gpt1
    wildcards: model=gpt1, dataset=bookcorpus
Shell command: None

[Sun Nov 29 03:25:42 2026]
localrule equilearning_pass:
    wildcards: model=gpt2, dataset=c4
Job stats:
job                  count
-----------------  -------
total                    3
"""
"""What a dry run prints (the job stats twice, as Snakemake prints them)."""
GPT1 = DryRunJob("equilearning_pass", (("dataset", "bookcorpus"), ("model", "gpt1")))
GPT2 = DryRunJob("equilearning_pass", (("dataset", "c4"), ("model", "gpt2")))


def row(model: str, dataset: str, gpu: int, runtime: int) -> dict:
    """A plan row of an equi-learning pass: its wildcards, GPUs and minutes."""
    wildcards = {"model": model, "dataset": dataset}
    return {"job": "equilearning_pass", "wildcards": wildcards, "gpu": gpu, "runtime": runtime}


def test_a_dry_run_s_jobs_are_read_with_their_wildcards():
    download = DryRunJob("download_model", (("model", "pythia-1b@step8"),))
    assert listed_jobs(PRINTED) == [download, GPT1, GPT2]
    assert listed_jobs("Building DAG of jobs...\nNothing to be done.\n") == []


def test_a_list_that_is_not_the_job_stats_count_is_an_error():
    with pytest.raises(LayerlawsError, match="listed 2 jobs but its job stats count 3"):
        listed_jobs(PRINTED.replace("rule download_model:", "rule download model:"))
    with pytest.raises(LayerlawsError, match="listed 3 jobs but its job stats count none"):
        listed_jobs(PRINTED.replace("total", "all"))


def test_the_gpu_hours_are_those_of_the_planned_jobs_listed():
    """GPUs × minutes / 60 of the listed jobs the plan holds (3 × 90 + 0 × 30); a job of
    another rule is not a model job; a plan row no job lists counts nothing."""
    plan = [row("gpt1", "bookcorpus", 3, 90), row("gpt2", "c4", 0, 30), row("gpt3", "c4", 8, 600)]
    download = DryRunJob("download_model", (("model", "gpt1"),))
    assert target_plan([download, GPT1, GPT2], plan) == TargetPlan(3, 2, 4.5)
    assert target_plan([], plan) == TargetPlan(0, 0, 0.0)


def test_a_job_of_a_planned_rule_missing_from_the_plan_is_an_error():
    with pytest.raises(LayerlawsError, match=r"job equilearning_pass \{'dataset': 'c4'"):
        target_plan([GPT1, GPT2], [row("gpt1", "bookcorpus", 3, 90)])


def test_the_module_imports_no_torch():
    assert_torch_free(["layerlaws.pipeline.target_plan"])


def test_a_sharded_pass_is_planned_as_its_shards(tmp_path):
    """He & Su's Fig. 2 with the pass in two shards (a real dry run of the paper config):
    its 7 jobs and the two shard jobs, its model jobs, with the plan's GPU-hours of each;
    the pass that merges them runs on the CPU."""
    config = yaml.safe_load((REPO / "configs" / "paper.yaml").read_text())
    config["equilearning"]["shards"] = 2
    path = tmp_path / "sharded.yaml"
    path.write_text(yaml.safe_dump(config))
    target = "results/equilearning/gpt1/medrag-textbooks/token_views.svg"
    plan = target_plans([[target]], path)[(target,)]
    rows = JobPlanner.from_config(read_config(path), Layout(str(tmp_path / "results"))).plan()
    shards = [row for row in rows if row["wildcards"].get("dataset") == "medrag-textbooks"]
    assert [row["job"] for row in shards] == ["equilearning_pass_shard"] * 2
    assert [row["wildcards"]["shard"] for row in shards] == ["0", "1"]
    expected = sum(row["gpu"] * row["runtime"] for row in shards) / 60
    assert expected > 0
    assert (plan.jobs, plan.model_jobs, plan.gpu_hours) == (9, 2, expected)
