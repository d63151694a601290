"""The README's "Your own model": its config block is configs/your-own-model.yaml, it plans
offline for the 8B model its ``size`` describes (dry run and ``snakemake estimate``), and
it runs as written against a fake Hugging Face cache holding a tiny Llama under the
config's hub id (the dataset read from a local folder through the same hub loader)."""

from __future__ import annotations

import json
import re

import polars as pl
import pytest
import yaml
from fake_hub import cached_snapshot
from snakemake.utils import validate
from snakemake_runs import REPO, run_ok, scheduled_jobs, write_config

from layerlaws.core.settings import SCHEMA_FILE
from layerlaws.pipeline.layout import Layout
from layerlaws.pipeline.planning import JobPlanner

CONFIG = REPO / "configs" / "your-own-model.yaml"
COMMIT = "fedcba9876543210fedcba9876543210fedcba98"


def readme_block() -> str:
    """The README's YAML block under *Your own model*."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("\n## Your own model\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```yaml\n(.*?)```", section, re.S).group(1)


def test_the_readme_block_is_the_config_file():
    assert readme_block() == CONFIG.read_text()


def test_it_plans_the_8b_model_offline(tmp_path):
    """Nothing is downloaded: the model's ``size`` sizes every job (the plan that
    ``snakemake estimate`` prints; its command is tested on the paper config)."""
    jobs = scheduled_jobs(tmp_path, configfile=CONFIG)
    assert jobs["prepare_model"] == 1 and jobs["equilearning_pass"] == 1
    assert jobs["sample_sentences"] == 1 and jobs["fit_law"] == 1
    assert jobs["compare_signatures"] == 1 and jobs["measure_coupling"] == 1
    config = yaml.safe_load(CONFIG.read_text())
    validate(config, str(SCHEMA_FILE))
    plan = JobPlanner.from_config(config, Layout(str(tmp_path / "results"))).plan()
    rows = {row["job"]: row for row in plan}
    assert set(rows) == {"equilearning_pass", "measure_coupling"} and len(plan) == 2
    for row in rows.values():
        assert (row["model"], row["parameters"], row["sized_by"]) == (
            "llama3.1-8b",
            8_030_261_248,
            "config size",
        )
        # bfloat16 weights (16 GB) with one norm's statistics, or with the Jacobians' working
        # memory, fit one GPU of 80 GB (gpus: auto, the default).
        assert row["gpu"] == 1
    assert not (tmp_path / "results").exists()


@pytest.fixture
def fake_hub_model(llama_folder):
    """A tiny Llama in the Hugging Face cache under the config's hub id, removed after."""
    model_id = yaml.safe_load(CONFIG.read_text())["models"]["llama3.1-8b"]["source"]["id"]
    with cached_snapshot(llama_folder, model_id, COMMIT):
        yield model_id


def test_it_runs_as_written_on_a_fake_hub_cache(fake_hub_model, texts, tmp_path):
    config = yaml.safe_load(CONFIG.read_text())
    folder = tmp_path / "wikitext"
    folder.mkdir()
    pl.DataFrame({"text": texts[:30]}).write_parquet(folder / "test.parquet")
    config["datasets"]["wikitext"]["source"] |= {"name": str(folder), "config": None}
    config["coupling"]["ks"] = [5, 10]  # the tiny Llama's hidden size is 24, not 4,096
    workdir = tmp_path / "run"
    write_config(workdir, config)
    run_ok(workdir)
    download = json.loads((workdir / "results/downloads/llama3.1-8b.json").read_text())
    assert (download["id"], download["commit"]) == (fake_hub_model, COMMIT)
    law = pl.read_csv(workdir / "results/equilearning/llama3.1-8b/wikitext/law.csv")
    assert law["norm"].unique().to_list() == ["model"]
    assert law.filter(pl.col("offset") == 1)["pearson"].is_finite().all()
    rcos = pl.read_csv(workdir / "results/signatures/llama3.1-8b/wikitext/rcos.csv")
    assert len(rcos) == 6 and rcos["r_cos"].is_finite().all()
    depth = pl.read_csv(
        workdir / "results/coupling/llama3.1-8b/wikitext/depth.csv",
        schema_overrides={"prompt": pl.String},
    )
    assert depth["prompt"].unique().len() == 6  # the paper's prompt, four texts, their mean
    assert depth["miscoupling"].is_finite().all()
    assert (workdir / "results/equilearning/llama3.1-8b/wikitext/law.svg").exists()
    assert (
        "bfloat16" in (workdir / "results/equilearning/llama3.1-8b/wikitext/pass.json").read_text()
    )
