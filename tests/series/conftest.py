"""The series workflow shared by the series tests: one Snakemake run of a training
series and a family series on tiny models."""

from __future__ import annotations

import pytest
from snakemake_runs import run_ok, write_config


@pytest.fixture(scope="session")
def series_config(llama_folder, gpt2_folder, corpus_file, tmp_path_factory):
    """A tiny Llama trained on the texts the probing dataset does not sample, with three
    checkpoints, as one series; three models with scores as another."""
    local = {"kind": "local", "path": str(llama_folder)}
    return {
        "models": {
            "tiny-llama": {"source": local, "scores": {"board": 30.0}},
            "tiny-gpt2": {
                "source": {"kind": "local", "path": str(gpt2_folder)},
                "scores": {"board": 20.0},
            },
            "tiny-random": {"source": local, "init": "random", "scores": {"board": 10.0}},
        },
        "datasets": {
            "mini": {
                "source": {"kind": "files", "paths": [str(corpus_file)]},
                "n_samples": 30,
                "max_tokens": 24,
            },
            "rest": {
                "source": {"kind": "files", "paths": [str(corpus_file)]},
                "n_samples": "all",
                "exclude": ["mini"],
            },
        },
        "training": {
            "tiny": {
                "num_layers": 2,
                "hidden_size": 16,
                "num_heads": 2,
                "tokenizer": "tiny-llama",
                "dataset": "rest",
                "held_out": "mini",
                "context": 16,
                "batch_size": 4,
                "steps": 8,
                "warmup_steps": 2,
                "checkpoints": [0, 2, 8],
                "eval_every": 4,
            }
        },
        "series": {
            "tiny": {
                "models": ["tiny"],
                "x": "step",
                "datasets": ["mini"],
                "prompts": "few",
                "signatures": "training_corpus",
            },
            "family": {
                "models": ["tiny-random", "tiny-gpt2", "tiny-llama"],
                "x": "label",
                "datasets": ["mini"],
                "prompts": "few",
            },
        },
        "signatures": {"top_tokens": 40},
        "coupling": {
            "prompts": {"few": {"dataset": "mini", "n_from_dataset": 1, "max_tokens": 8}},
            "ks": [2, 4],
            "lss_window": 2,
            "metrics": ["paper", "released_trace"],
        },
        "equilearning": {"offsets": [1], "norms": ["model"], "controls": ["none"]},
        "execution": {"batch_size": 8, "lock_dir": str(tmp_path_factory.mktemp("locks"))},
    }


@pytest.fixture(scope="session")
def series_run(series_config, tmp_path_factory):
    """The workdir in which both series have run (read by test_series and
    test_series_references; tests that change it work on a copy)."""
    workdir = tmp_path_factory.mktemp("series")
    write_config(workdir, series_config)
    run_ok(workdir)
    return workdir
