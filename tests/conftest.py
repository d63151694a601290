"""Shared fixtures: tiny tokenizers and randomly initialised models, a tiny corpus, the
tiny workflow run once, the series workflow run once.

The suite leaves the machine as it found it: whatever the libraries it runs cache
(Hugging Face, matplotlib, Snakemake, torch) goes to one folder, removed when the session
ends, and nothing is fetched from the Hugging Face hub. This is set before those
libraries are imported, and the Snakemake runs of the tests inherit it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

CACHE = tempfile.mkdtemp(prefix="layerlaws-test-cache-")
os.environ.update(
    {
        "XDG_CACHE_HOME": CACHE,
        "HF_HOME": f"{CACHE}/huggingface",
        "HF_HUB_OFFLINE": "1",
        "MPLCONFIGDIR": f"{CACHE}/matplotlib",
        "TORCHINDUCTOR_CACHE_DIR": f"{CACHE}/torchinductor",
    }
)

import pytest
import torch
from tiny_models import save_tiny_model
from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from layerlaws.text.sources import wikipedia_summaries

REPO = Path(__file__).resolve().parent.parent


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(CACHE, ignore_errors=True)


SHARED_RUNS = {"finished": "finished", "series_run": "series"}
"""Session fixtures that run a whole workflow → the worker group of the modules reading them."""


def pytest_configure(config: pytest.Config) -> None:
    """A pytest-xdist worker computes on its share of the cores (torch's threads; with
    each of two workers on both cores of a 2-core machine, their OpenMP threads wait on
    each other and small models run 10× slower), or on ``LAYERLAWS_TEST_THREADS``.

    Under ``--dist loadgroup``, stop unless pytest-xdist can write a test's group into its
    node id (``name@group``, what the scheduler reads; it sets ``item._nodeid``, which
    pytest 9.2 no longer reads): modules would otherwise be split across workers, and two
    workers make one module's fixtures twice, such as two SLURM clusters on one machine."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    threads = os.environ.get("LAYERLAWS_TEST_THREADS")  # set by tests/kernel_sets.py
    torch.set_num_threads(int(threads) if threads else max(1, (os.cpu_count() or 1) // workers))
    if config.getoption("dist", "no") != "loadgroup":
        return
    try:
        grouped = pytest.Item.nodeid.fget(SimpleNamespace(_nodeid="t@g")) == "t@g"
    except AttributeError:
        grouped = False
    if not grouped:
        raise pytest.UsageError(
            f"pytest {pytest.__version__} keeps node ids where pytest-xdist's --dist loadgroup "
            "cannot add the group, so modules would be split across workers; install the "
            "versions of requirements.lock (make test does)"
        )


NUMERICAL = {
    f"tests/{module}.py"
    for module in (
        "core/test_geometry",
        "core/test_products",
        "coupling/test_coupling",
        "coupling/test_coupling_matrices",
        "coupling/test_matrix_free",
        "coupling/test_per_prompt",
        "coupling/test_released_metrics",
        "equilearning/test_equilearning",
        "equilearning/test_evaluation",
        "equilearning/test_fuzziness",
        "equilearning/test_law",
        "equilearning/test_layer_states",
        "equilearning/test_norms",
        "equilearning/test_regression",
        "forward/test_encoder_decoder",
        "forward/test_forward_pass",
        "forward/test_pass_shards",
        "geometry/test_geometry_definitions",
        "geometry/test_geometry_observer",
        "models/test_heads",
        "models/test_precision",
        "series/test_fit_subsets",
        "series/test_score_fits",
        "signatures/test_counting",
        "signatures/test_signatures",
        "signatures/test_token_groups",
    )
}
"""The modules whose tests compare the code's numbers with an independent reference (marked
``numerics``: rerun under each kernel set and thread count, tests/kernel_sets.py)."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Groups for pytest-xdist's ``--dist loadgroup`` (make test): the tests of a module run
    on one worker, so its module fixtures are made once, and the modules that read the same
    workflow run (``SHARED_RUNS``) run on one worker, so that run is made once. The tests of
    ``NUMERICAL`` are marked ``numerics``."""
    groups: dict[str, str] = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        if module in NUMERICAL:
            item.add_marker(pytest.mark.numerics)
        for fixture, group in SHARED_RUNS.items():
            if fixture in item.fixturenames:
                groups[module] = group
    for item in items:
        module = item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(groups.get(module, module)))


def corpus_texts(count: int = 80) -> list[str]:
    """Real English texts from the offline Wikipedia summaries (deterministic)."""
    return [text for text, _ in wikipedia_summaries({"topics": ["Mathematics"]})[:count]]


def build_tokenizer(texts: list[str], add_bos: bool, padding_side: str) -> PreTrainedTokenizerFast:
    """A word-level tokenizer trained on ``texts``: Llama-like (adds BOS, pads left) or
    GPT-2-like (no BOS, pads right)."""
    core = Tokenizer(models.WordLevel(unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "<pad>"])
    core.train_from_iterator(texts, trainer)
    if add_bos:
        core.post_processor = processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", core.token_to_id("<s>"))]
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        unk_token="<unk>",
        bos_token="<s>",
        pad_token="<pad>",
        padding_side=padding_side,
    )


TEST_SIZES = {
    "hidden_size": 24,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "max_position_embeddings": 128,
}
"""Sizes of the tiny Llama and GPT-2 of the workflow tests (4 layers, hidden size 24)."""


def llama_tokenizer(texts: list[str]) -> PreTrainedTokenizerFast:
    """Llama-like: adds BOS, pads on the left."""
    return build_tokenizer(texts, add_bos=True, padding_side="left")


@pytest.fixture(scope="session")
def texts() -> list[str]:
    return corpus_texts()


@pytest.fixture(scope="session")
def tokenizer(texts: list[str]) -> PreTrainedTokenizerFast:
    """The Llama-like tokenizer of the tiny models (a module may define its own)."""
    return llama_tokenizer(texts)


@pytest.fixture(scope="session")
def llama_folder(tmp_path_factory: pytest.TempPathFactory, texts: list[str]) -> Path:
    return save_tiny_model(
        tmp_path_factory.mktemp("llama"), "llama", llama_tokenizer(texts), **TEST_SIZES
    )


@pytest.fixture(scope="session")
def gpt2_folder(tmp_path_factory: pytest.TempPathFactory, texts: list[str]) -> Path:
    """GPT-2-like: no BOS, pads on the right, tied embeddings."""
    tokenizer = build_tokenizer(texts, add_bos=False, padding_side="right")
    return save_tiny_model(tmp_path_factory.mktemp("gpt2"), "gpt2", tokenizer, **TEST_SIZES)


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory: pytest.TempPathFactory, texts: list[str]) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "texts.jsonl"
    path.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
    return path


@pytest.fixture(scope="session")
def base_config(llama_folder, gpt2_folder, corpus_file, tmp_path_factory):
    """The tiny workflow: two models (Llama-like untied, GPT-2-like tied) on one dataset,
    signatures of a dataset and of a pool, coupling of a prompt set."""
    return {
        "models": {
            "tiny-llama": {"source": {"kind": "local", "path": str(llama_folder)}},
            "tiny-gpt2": {"source": {"kind": "local", "path": str(gpt2_folder)}},
        },
        "datasets": {
            "mini": {
                "source": {"kind": "files", "paths": [str(corpus_file)]},
                "n_samples": 40,
                "max_tokens": 24,
            },
        },
        "runs": [
            {"model": "tiny-llama", "dataset": "mini"},
            {"model": "tiny-gpt2", "dataset": "mini"},
        ],
        "signatures": {
            "pools": {"pooled": ["mini"]},
            "runs": [
                {"model": "tiny-llama", "dataset": "mini"},
                {"model": "tiny-gpt2", "dataset": "pooled"},
            ],
            "top_tokens": 60,
        },
        "coupling": {
            "prompts": {"few": {"dataset": "mini", "n_from_dataset": 1, "max_tokens": 8}},
            "runs": [{"model": "tiny-llama", "prompts": "few"}],
            "ks": [2, 4],
            "token_layers": [1, [2, 4]],
            "fixed_input_token": 1,
            "lss_window": 2,
        },
        "equilearning": {
            "norms": ["model", "standardize", "none"],
            "token_views": {"groups": [["is", "are"], ["the"]], "layers": [0, 4], "max_rows": 20},
        },
        "hidden_states": {"keep": True},
        "execution": {
            "batch_size": 8,
            "shard_texts": 30,
            "lock_dir": str(tmp_path_factory.mktemp("locks")),
        },
    }


@pytest.fixture(scope="session")
def finished(base_config, tmp_path_factory):
    """A workdir in which the whole tiny workflow has run once (shared by the workflow and
    SLURM tests, which copy it before changing anything)."""
    from snakemake_runs import run_ok, write_config

    workdir = tmp_path_factory.mktemp("workflow")
    write_config(workdir, base_config)
    run_ok(workdir)
    return workdir


@pytest.fixture(scope="session")
def every_array(finished, base_config, tmp_path_factory):
    """A copy of the finished workdir whose coupling job reran with ``coupling.keep_arrays:
    all`` (the finished run keeps the figures' prompts' arrays, the default)."""
    from snakemake_runs import run_ok, write_config

    workdir = tmp_path_factory.mktemp("every-array") / "workflow"
    shutil.copytree(finished, workdir, symlinks=True)
    coupling = base_config["coupling"] | {"keep_arrays": "all"}
    write_config(workdir, base_config | {"coupling": coupling})
    run_ok(workdir, "results/coupling/tiny-llama/few/trajectories/pca.svg")
    return workdir


@pytest.fixture(scope="session")
def series_config(llama_folder, gpt2_folder, corpus_file, tmp_path_factory):
    """A tiny Llama trained on the texts the probing dataset does not sample, with three
    checkpoints, as one series, its runs measuring the representation geometry; three
    models with scores as another."""
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
        "equilearning": {
            "offsets": [1],
            "norms": ["model"],
            "controls": ["none"],
            "observers": [{"name": "geometry", "models": ["tiny"]}],
        },
        "execution": {"batch_size": 8, "lock_dir": str(tmp_path_factory.mktemp("locks"))},
    }


@pytest.fixture(scope="session")
def series_run(series_config, tmp_path_factory):
    """The workdir in which both series have run (read by test_series and
    test_series_references; tests that change it work on a copy)."""
    from snakemake_runs import run_ok, write_config

    workdir = tmp_path_factory.mktemp("series")
    write_config(workdir, series_config)
    run_ok(workdir)
    return workdir


TINY_TRAINING = {
    "architecture": "llama",
    "num_layers": 2,
    "hidden_size": 16,
    "num_heads": 2,
    "intermediate_size": None,
    "tie_embeddings": True,
    "context": 16,
    "batch_size": 4,
    "steps": 12,
    "learning_rate": 3e-3,
    "warmup_steps": 3,
    "final_learning_rate": 0.1,
    "weight_decay": 0.1,
    "betas": [0.9, 0.95],
    "grad_clip": 1.0,
    "seed": 0,
    "checkpoints": [0, 2, 5, 12],
    "eval_every": 4,
    "held_out_sequences": 4,
}
"""The settings of a tiny Llama trained for 12 steps (a training block of the config), for
the training tests to vary."""


@pytest.fixture(scope="session")
def corpus(texts):
    """A training corpus: the tokenizer of ``llama_tokenizer``, 60 texts packed into
    sequences of TINY_TRAINING's context and 4 held-out sequences from the rest."""
    from layerlaws.training.train import packed_texts

    tokenizer = llama_tokenizer(texts)
    sequences = packed_texts(tokenizer, texts[:60], TINY_TRAINING["context"])
    held_out = packed_texts(tokenizer, texts[60:], TINY_TRAINING["context"])[:4]
    return tokenizer, sequences, held_out
