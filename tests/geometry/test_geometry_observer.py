"""The geometry observer on a tiny random Llama, beyond its definitions (those are in
test_geometry_definitions.py): the non-default choices against the references of
``authors_reference`` computed in NumPy float64 from the states of the same pass; shards,
a resume and an out-of-memory split against the one-job pass; an empty pass, NaN states,
the cost model and bad settings."""

import io

import geometry_fixtures
import numpy as np
import pytest
import torch
from geometry_passes import (
    ARCCOS,
    EXACT,
    OTHER,
    PAPERS,
    TEXTS,
    assert_tables_close,
    model_in,
    passed,
    reference,
)

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.shards import shard_indices
from layerlaws.forward.model_pass import (
    Batch,
    first_rows,
    progress_of,
    restore,
    run_forward_pass,
    sequences_of,
)
from layerlaws.forward.shards import merge_pass_shards, write_pass_shard
from layerlaws.geometry.costs import accumulator_bytes
from layerlaws.geometry.observer import QUANTITIES, GeometryObserver
from layerlaws.geometry.settings import GeometrySettings
from layerlaws.models.architectures import blocks_of

float32_pass = pytest.fixture(scope="module")(geometry_fixtures.float32_pass)
one_job = pytest.fixture(scope="module")(geometry_fixtures.one_job)
tiny = pytest.fixture(scope="module")(geometry_fixtures.tiny)

SHIFTS = {"curvature": ARCCOS}
"""Shards, and the halves of a split batch, shift their states by their own first batch's
mean: the float64 states round differently by ~1e-16, which only the curvature's arccos
near |cos| = 1 turns into more (``ARCCOS``)."""


def test_the_other_choices_match_their_references_from_the_kept_states(tiny, float32_pass):
    """``prompt_states: raw`` (uncentred Gram matrices, unclipped), ``curvature_angle:
    signed``, ``anisotropy_pairs: all``, α = 2, ``dataset_rows: tokens``, ranks 2..10,
    float64 products: every column equals its reference to 1e-12 (the sums, centred after
    summing, and the references agree to about 3e-14), the curvature to 1e-9: at layer 0
    a repeated token makes consecutive raw steps opposite, where arccos turns a rounding
    of the cosine into √ε ≈ 1e-8 of angle (1.4e-10 of the mean measured)."""
    (papers, other, _), keeper = float32_pass
    expected = reference(keeper.rows, OTHER, tiny[1].num_layers)
    assert_tables_close(other.table(), expected, {"curvature": ARCCOS})
    # Not the same numbers as under the papers' choices (the test above could not tell);
    # the anisotropy's pairs within a text are few (1e-4 apart at the embeddings).
    changed = ["alpha_req", "dataset_entropy", "prompt_entropy", "curvature", "anisotropy"]
    differences = papers.table()[changed].to_numpy() - other.table()[changed].to_numpy()
    assert (np.abs(differences) > [1e-3, 1e-3, 1e-3, 1e-3, 1e-5]).all()


def merged_shards(tiny, shards: int, folder) -> GeometryObserver:
    """The pass in ``shards`` shards of disjoint texts, written and merged as the workflow
    does (``write_pass_shard``, ``merge_pass_shards``)."""
    paths = []
    for shard in range(shards):
        indices = shard_indices(TEXTS, shard, shards)
        (observer,), _, report = passed(tiny, torch.float64, (EXACT,), indices=indices)
        paths.append(folder / f"{shard}.pt")
        write_pass_shard(paths[-1], [observer], report)
    merged = GeometryObserver(EXACT, tiny[1].num_layers)
    merge_pass_shards(paths, [merged], lambda: [GeometryObserver(EXACT, tiny[1].num_layers)])
    return merged


@pytest.mark.parametrize("shards", [2, 3])
def test_shards_merge_into_the_one_job_table(tiny, one_job, tmp_path, shards):
    assert_tables_close(merged_shards(tiny, shards, tmp_path).table(), one_job.table(), SHIFTS)


def test_a_resumed_observer_gives_the_same_table(tiny, float32_pass):
    (observer, _, _), _ = float32_pass
    buffer = io.BytesIO()
    torch.save(progress_of(observer), buffer)
    buffer.seek(0)
    resumed = GeometryObserver(PAPERS, tiny[1].num_layers)
    restore(resumed, torch.load(buffer, weights_only=False))
    assert resumed.table().equals(observer.table())


def test_an_out_of_memory_split_counts_every_row_once(tiny):
    """A batch of 7 texts that fails at block 2 (layers 0 and 1 observed whole) is split
    down to two texts; the halves find their rows in the whole batch's kept states."""
    _, facts, tokens = tiny
    (whole,), _, _ = passed(tiny, torch.float64, (EXACT,), indices=range(8))
    model = model_in(tiny, torch.float64)

    def full(_module, args, kwargs):
        if len(args[0] if args else kwargs["hidden_states"]) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (injected)")

    blocks_of(model)[2].register_forward_pre_hook(full, with_kwargs=True)
    split = GeometryObserver(EXACT, facts.num_layers)
    report = run_forward_pass(
        model, facts, tokens, [split], 7, "cpu", progress=False, sequence_indices=range(8)
    )
    assert report["out_of_memory_retries"] == 3
    assert_tables_close(split.table(), whole.table(), SHIFTS)
    assert not split._kept, "kept states outlive their batch"


def test_an_empty_pass_gives_rows_of_nan_and_merges_as_nothing(tiny, one_job):
    num_layers = tiny[1].num_layers
    empty = GeometryObserver(PAPERS, num_layers).table()
    assert empty["layer"].to_list() == list(range(num_layers + 1))
    assert (empty["n_rows"] == 0).all()
    assert np.isnan(empty[list(QUANTITIES)].to_numpy()).all()
    merged = GeometryObserver(PAPERS, num_layers)
    for observer in (one_job, GeometryObserver(PAPERS, num_layers)):
        merged.merge_(observer)
    assert merged.table().equals(one_job.table())


def test_a_nan_state_makes_its_layer_nan(tiny):
    """Random states with one NaN at layer 2 (in a text of several tokens): every quantity
    of layer 2 and the CKA of the pairs it is in are NaN, nothing else is."""
    _, facts, tokens = tiny
    sequences = sequences_of(tokens)
    batch = Batch.of(sequences, [0, 1, 2], first_rows(sequences))
    observer = GeometryObserver(PAPERS, facts.num_layers)
    observer.begin_batch(batch)
    generator = torch.Generator().manual_seed(0)
    for layer in range(facts.num_layers + 1):
        states = torch.randn(
            len(batch.row_numbers), facts.hidden_size, generator=generator, dtype=torch.float64
        )
        if layer == 2:
            states[5, 3] = torch.nan
        observer.observe(layer, states)
    table = observer.table()
    for column in QUANTITIES:
        nan_layers = list(np.flatnonzero(np.isnan(table[column].to_numpy())))
        expected = {"cka_previous": [0, 2, 3], "cka_last": [2]}.get(column, [2])
        assert nan_layers == expected, column


@pytest.mark.parametrize("which", [0, 1], ids=["papers", "other"])
def test_the_cost_model_counts_the_accumulators_held(tiny, float32_pass, which):
    """The accumulators held are what ``accumulator_bytes`` counts; at d = 4,096, L = 32
    the observer needs, with no batch passing, its accumulators (17.3 GB; 8.7 GB with
    ``dataset_rows: tokens`` and the consecutive pairs only) and the d × d matrices
    ``observe`` makes (the product in the product dtype, the second moment's float64
    product and, with text rows, their float64 moment): 17.65 GB, and 9.00 GB with float64
    products and no text rows."""
    observer = float32_pass[0][which]
    settings = observer.settings
    tensors = [*observer.cross.values()]
    tensors += [tensor for part in observer.layers.values() for tensor in part.tensors().values()]
    held = sum(tensor.nbytes for tensor in tensors)
    facts = tiny[1]
    assert held == accumulator_bytes(
        settings, hidden_size=facts.hidden_size, num_layers=facts.num_layers
    )
    assert GeometryObserver.bytes_on_device(
        settings, hidden_size=4096, num_layers=32, batch_tokens=0, dtype_bytes=2, tokens_per_text=1
    ) == pytest.approx(17.65e9 if settings.cka_against_last else 9.00e9, rel=0.005)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"entropy_alpha": 0}, "must be positive"),
        ({"dataset_rows": "prompts"}, "dataset_rows is 'prompts'; choose one of"),
        ({"alpha_req_ranks": (10, 5)}, "first < last"),
        ({"rankme_epsilon": -1}, ">= 0"),
        ({"prompt_states": "centred"}, "prompt_states is 'centred'; choose one of"),
        ({"curvature_angle": "cosine"}, "curvature_angle is 'cosine'; choose one of"),
        ({"anisotropy_pairs": "pairs"}, "anisotropy_pairs is 'pairs'; choose one of"),
    ],
)
def test_bad_settings_are_clear_errors(options, message):
    """A wrong value is a LayerlawsError naming the key and the value."""
    with pytest.raises(LayerlawsError, match=message):
        GeometrySettings(**options)
