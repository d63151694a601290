"""A prompt set's job holds one prompt's measurement at a time, whatever the number of
prompts: ``measure_prompts`` writes each to its file before it measures the next, and
``write_outputs`` appends each to the outputs before it reads the next. The outputs
written so are those of the whole set assembled in memory (as the job did before): the
tables concatenated, the ``mean`` rows by polars' group-by, ``mean_abs`` by ``numpy.mean``."""

from __future__ import annotations

import copy
import weakref

import numpy as np
import polars as pl
import polars.testing
from coupling_runs import measured_files, written

import layerlaws.coupling.prompt_set as prompt_set
from layerlaws.coupling.measurement import TokenCoupling
from layerlaws.coupling.settings import CouplingSettings
from layerlaws.models.loading import coupling_twins

PROMPTS = [[1, 5, 9, 14, 3], [1, 22, 8, 30], [1, 4, 12, 6, 19]]
SETTINGS = CouplingSettings(ks=(2, 3), token_layers=((2, 4), (1, 1)), svd="randomized")
WEIGHTS = ("trained", "random")


class Held:
    """Weak references to every measurement handed out: how many are still alive."""

    def __init__(self) -> None:
        self.references: list[weakref.ref] = []

    def alive(self) -> int:
        return sum(reference() is not None for reference in self.references)

    def handed(self, measurement):
        self.references.append(weakref.ref(measurement))
        return measurement


def assembled(measurements: dict, token_layers: tuple[int, int]) -> dict:
    """The set's tables and arrays from every prompt's measurement held at once."""
    tables = {name: [] for name in prompt_set.TABLES}
    factors, streams = {}, {}
    couplings = {"k": np.array(2), "token_layers": np.array(token_layers)}
    for weights in WEIGHTS:
        for index, ids in enumerate(PROMPTS):
            prompt = measurements[weights, index]
            for name, rows in tables.items():
                rows += [
                    {"weights": weights, "prompt": str(index)} | r for r in getattr(prompt, name)
                ]
            for row in tables["trajectories"][-len(prompt.trajectories) :]:
                row["text"] = str(ids[row["token"]])
            factors |= {f"{weights}/{index}/{key}": a for key, a in prompt.factors.items()}
            streams[f"{weights}/{index}"] = prompt.streams
            couplings[f"depth/{weights}/{index}"] = prompt.depth_couplings
            if index == 0:
                couplings[f"tokens/{weights}/0"] = prompt.token_couplings
        every = [np.abs(measurements[weights, i].depth_couplings) for i in range(len(PROMPTS))]
        couplings[f"depth/{weights}/mean_abs"] = np.mean(every, axis=0, dtype=np.float64).astype(
            np.float32
        )
    frames = {name: pl.DataFrame(rows) for name, rows in tables.items()}
    depth = frames["depth"]
    mean = (
        depth.group_by("weights", "layer_a", "layer_b", "k", "metric", maintain_order=True)
        .agg(pl.col("miscoupling").mean())
        .with_columns(prompt=pl.lit("mean"))
    )
    frames["depth"] = pl.concat([depth, mean.select(depth.columns)])
    return frames | {"factors": factors, "streams": streams, "couplings": couplings}


def test_one_prompt_is_held_at_a_time_and_the_outputs_are_the_whole_sets(
    llama_folder, tmp_path, monkeypatch
):
    twins = coupling_twins(llama_folder, None, "float32", "cpu", SETTINGS.init_seed)
    coupling = TokenCoupling.of(SETTINGS, 4)
    measuring, copies, real_measure = Held(), [], prompt_set.measure_prompt

    def measure_prompt(model, input_ids, **kwargs):
        assert measuring.alive() == 0, "an earlier prompt's measurement is still held"
        measurement = real_measure(model, input_ids, **kwargs)
        copies.append(copy.deepcopy(measurement))
        return measuring.handed(measurement)

    monkeypatch.setattr(prompt_set, "measure_prompt", measure_prompt)
    files = measured_files(
        twins, PROMPTS, tmp_path / "prompts", settings=SETTINGS, token_coupling=coupling
    )
    assert len(copies) == 6 and measuring.alive() == 0
    reading = Held()

    class OneAtATime:
        units = files.units

        def read(self, weights, index):
            assert reading.alive() == 0, "an earlier prompt's measurement is still held"
            return reading.handed(files.read(weights, index))

    found = written(OneAtATime(), PROMPTS, coupling, SETTINGS)
    assert len(reading.references) == 6 and reading.alive() == 0

    expected = assembled(dict(zip(files.units, copies, strict=True)), (2, 4))
    for name in prompt_set.TABLES:
        assert expected[name].height > 0, name
        polars.testing.assert_frame_equal(getattr(found, name), expected[name], check_exact=True)
    for name in prompt_set.ARRAYS:
        arrays = getattr(found, name)
        assert list(arrays) == list(expected[name]), name
        for key, array in expected[name].items():
            assert arrays[key].dtype == array.dtype, f"{name} {key}"
            np.testing.assert_array_equal(arrays[key], array, err_msg=f"{name} {key}")
