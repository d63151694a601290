"""Fault injection through real Snakemake runs: the shards of a model pass and an
``extract_hidden`` job each killed with SIGKILL right after their first progress save
(``tests/fault_injection``) resume when Snakemake runs again and end with the outputs of an
uninterrupted run; a plug-in observer (docs/observers.md's example, saved beside the
config) is sharded and resumed with the pass's own."""

from __future__ import annotations

import shutil

import numpy as np
import polars as pl
import pytest
from fault_injection import killed_saves, killing_environment
from observer_example import EXAMPLE, write_example
from snakemake_runs import run_ok, snakemake, write_config

from layerlaws.forward.kept_states import HiddenStates

pytestmark = pytest.mark.slow

PASS = "results/equilearning/tiny-llama/mini"
HIDDEN = "results/hidden/tiny-llama/mini"
EVALUATION = "results/evaluation/tiny-llama/mini.csv"
TABLES = [f"{PASS}/pr.csv", f"{PASS}/fuzziness.csv", f"{PASS}/token_views.csv", EVALUATION]


def test_killed_model_passes_resume_to_the_uninterrupted_outputs(finished, base_config, tmp_path):
    """The tiny Llama's pass in two shards (``equilearning.shards: 2``) and its
    ``extract_hidden`` job, each killed after its first save, resumed, the shards merged:
    the kept states bit for bit, the pass's tables within float32 rounding of the states
    (a text's states depend on the batch it is padded in), the fuzziness's class sums all
    in spill files (``execution.fuzziness_host_gb: 0``); the plug-in's table equal to
    its own reference, the mean of |x|² of every layer's kept states. (The one-job pass's
    resume is tested through SLURM's requeue, ``tests/workflow/test_slurm.py``.)"""
    workdir = tmp_path / "killed"
    shutil.copytree(finished, workdir, symlinks=True)
    # Saves after every batch (40 texts in batches of 8: five); the batches as finished ran.
    # Host memory for no open fuzziness class sum: every one in a spill file.
    execution = {**base_config["execution"], "checkpoint_minutes": 0, "fuzziness_host_gb": 0}
    write_example(workdir)
    plugin = {"name": "mean_norm", "class": f"{EXAMPLE}:MeanNorm", "settings": {"power": 2}}
    equilearning = {**base_config["equilearning"], "shards": 2, "observers": [plugin]}
    write_config(workdir, {**base_config, "execution": execution, "equilearning": equilearning})
    again = ["--forcerun", "extract_hidden", "--keep-going"]
    targets = [f"{PASS}/pr.csv", HIDDEN]
    environment = killing_environment(tmp_path / "fault")

    killed = snakemake(workdir, *targets, *again, env=environment)
    assert killed.returncode != 0
    assert killed_saves(tmp_path / "fault") == [
        *(f"{PASS}/shards/.resume/{shard}.pt.pt" for shard in (0, 1)),
        "results/hidden/tiny-llama/.resume/mini.pt",
    ]
    assert (workdir / PASS / "shards/.resume/0.pt.pt").exists()

    run_ok(workdir, *targets, env=environment)
    logs = workdir / "results/logs"
    for log in [
        *(logs / f"equilearning_pass_shard/tiny-llama/mini/{shard}.log" for shard in (0, 1)),
        logs / "extract_hidden/tiny-llama/mini.log",
    ]:
        assert "resuming the pass after batch 1" in log.read_text(), log
    assert "merged the pass shard" in (logs / "equilearning_pass/tiny-llama/mini.log").read_text()
    for table in TABLES:
        found, expected = (pl.read_csv(root / table) for root in [workdir, finished])
        assert expected.height > 0 and found.columns == expected.columns, table
        for column in expected.columns:
            if expected[column].dtype.is_float():
                np.testing.assert_allclose(
                    found[column].to_numpy(), expected[column].to_numpy(), rtol=1e-4, err_msg=table
                )
            else:
                assert found[column].equals(expected[column]), (table, column)
    sharded, uninterrupted = (
        np.load(root / PASS / "token_views.npz") for root in [workdir, finished]
    )
    assert uninterrupted.files and sharded.files == uninterrupted.files
    for name in uninterrupted.files:
        np.testing.assert_allclose(sharded[name], uninterrupted[name], rtol=1e-5, atol=1e-6)
    resumed, uninterrupted = (HiddenStates.open(root / HIDDEN) for root in [workdir, finished])
    assert resumed.rows.equals(uninterrupted.rows)
    for layer in range(uninterrupted.metadata["num_layers"] + 1):
        assert np.array_equal(resumed.layer(layer), uninterrupted.layer(layer)), layer
    mean_norm = pl.read_csv(workdir / PASS / "observers/mean_norm.csv")
    layers = range(uninterrupted.metadata["num_layers"] + 1)
    kept = [uninterrupted.layer(layer).astype(np.float64) for layer in layers]
    assert mean_norm["layer"].to_list() == list(layers)
    assert mean_norm["n_rows"].to_list() == [len(states) for states in kept]
    expected = [np.mean(np.sum(states**2, axis=1)) for states in kept]
    np.testing.assert_allclose(mean_norm["mean"].to_numpy(), expected, rtol=1e-5)
    assert not (workdir / PASS / "shards/.resume").exists()
    assert not (workdir / "results/hidden/tiny-llama/.resume").exists()
