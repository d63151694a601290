"""The geometry observer on a tiny random Llama: every quantity against a reference computed
in NumPy float64 from the states of the same pass, kept by a plain observer (SVD for
RankMe, ``np.cov`` and ``np.polyfit`` for α-ReQ, the texts' own Gram matrices for the
entropies, loops for curvature and anisotropy, the HSIC form of CKA on the centred
Gram matrices); shards, a resume and an out-of-memory split against the one-job pass;
an empty pass, NaN states, the cost model and bad settings."""

import io
from itertools import combinations

import numpy as np
import polars as pl
import pytest
import torch

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
from layerlaws.models.loading import load_model, load_tokenizer
from layerlaws.models.preparation import prepare_model
from layerlaws.text.tokens import tokenize_sentences

PAPERS = GeometrySettings()
"""The papers' choices: α = 1, dataset entropy on the texts' means, CKA against the last;
each batch's products in float32 (the default)."""
EXACT = GeometrySettings(product_dtype="float64")
"""The papers' choices with float64 products: shards, a resume and a split agree with the
one job to rounding."""
OTHER = GeometrySettings(
    entropy_alpha=2.0,
    dataset_rows="tokens",
    alpha_req_ranks=(2, 10),
    cka_against_last=False,
    product_dtype="float64",
)
"""The other choices, measured in the same pass."""
TEXTS = 24


@pytest.fixture(scope="module")
def tiny(llama_folder, texts, tmp_path_factory):
    """The tiny Llama's facts and the tokens of 24 texts (≤ 24 tokens each)."""
    folder = tmp_path_factory.mktemp("geometry") / "m"
    facts = prepare_model({"source": {"kind": "local", "path": str(llama_folder)}}, folder)
    sentences = pl.DataFrame(
        {"sentence_id": list(range(TEXTS)), "text": texts[:TEXTS], "source": ["t"] * TEXTS}
    )
    tokens = tokenize_sentences(sentences, load_tokenizer(folder), max_tokens=24)
    return folder, facts, tokens


def model_in(tiny, dtype):
    return load_model(tiny[0], "float32", "cpu").to(dtype)


class Keeper:
    """Keeps every layer's states (float64) with each row's text."""

    progress_attributes = ()

    def __init__(self) -> None:
        self.states: dict[int, list[np.ndarray]] = {}
        self.texts: dict[int, list[np.ndarray]] = {}

    def begin_batch(self, batch) -> None:
        self.batch_texts = batch.rows["sentence_id"].to_numpy()

    def observe(self, layer, states) -> None:
        self.states.setdefault(layer, []).append(states.double().numpy().copy())
        self.texts.setdefault(layer, []).append(self.batch_texts)

    def rows(self, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """All rows of ``layer`` (n, d) and their texts (n,), in pass order (each text's
        rows in position order)."""
        return np.concatenate(self.states[layer]), np.concatenate(self.texts[layer])


def passed(tiny, dtype, settings=(PAPERS,), indices=None, batch_size=4):
    """Observers of ``settings``, a Keeper and the report after one pass over ``indices``."""
    _, facts, tokens = tiny
    observers = [GeometryObserver(choice, facts.num_layers) for choice in settings]
    keeper = Keeper()
    model = model_in(tiny, dtype)
    report = run_forward_pass(
        model,
        facts,
        tokens,
        [*observers, keeper],
        batch_size,
        "cpu",
        progress=False,
        sequence_indices=indices,
    )
    return observers, keeper, report


@pytest.fixture(scope="module")
def float32_pass(tiny):
    """Observers of the papers' and the other choices, and a Keeper, after a float32 pass
    (the observers convert; the references read the same float32 states)."""
    observers, keeper, _ = passed(tiny, torch.float32, (PAPERS, OTHER))
    return observers, keeper


@pytest.fixture(scope="module")
def one_job(tiny):
    """The papers' observer (float64 products) after a float64 pass (a text's states then
    do not depend on its batch)."""
    (observer,), _, _ = passed(tiny, torch.float64, (EXACT,))
    return observer


def entropy(matrix: np.ndarray, alpha: float) -> float:
    """Rényi entropy of a Gram matrix's normalised eigenvalues."""
    values = np.clip(np.linalg.eigvalsh(matrix), 0, None)
    p = values[values > 0] / values.sum()
    return float(-(p * np.log(p)).sum() if alpha == 1 else np.log((p**alpha).sum()) / (1 - alpha))


def curvature(states: np.ndarray) -> float | None:
    """The text's mean angle between consecutive steps (zero steps left out)."""
    angles = []
    for t in range(len(states) - 2):
        one, two = states[t + 1] - states[t], states[t + 2] - states[t + 1]
        if np.linalg.norm(one) and np.linalg.norm(two):
            cosine = one @ two / (np.linalg.norm(one) * np.linalg.norm(two))
            angles.append(np.arccos(np.clip(cosine, -1, 1)))
    return np.mean(angles) if angles else None


def hsic_cka(x: np.ndarray, y: np.ndarray) -> float:
    """Linear CKA as Kornblith et al. write it: HSIC of the linear Gram matrices, centred
    (HKH = XcXcᵀ with Xc the column-centred X), n × n."""
    k, l = [(z - z.mean(axis=0)) @ (z - z.mean(axis=0)).T for z in (x, y)]  # noqa: E741
    return float((k * l).sum() / np.sqrt((k * k).sum() * (l * l).sum()))


def reference(keeper: Keeper, settings: GeometrySettings, num_layers: int) -> pl.DataFrame:
    records = []
    last, _ = keeper.rows(num_layers)
    for layer in range(num_layers + 1):
        x, texts = keeper.rows(layer)
        singular = np.linalg.svd(x, compute_uv=False)
        p = singular / singular.sum() + settings.rankme_epsilon
        eigenvalues = np.linalg.eigvalsh(np.cov(x.T))[::-1]
        first, final = settings.alpha_req_ranks
        rank = np.arange(first, min(final, x.shape[1], len(x) - 1) + 1)
        slope, _ = np.polyfit(np.log(rank), np.log(eigenvalues[rank - 1]), 1, w=rank**-0.5)
        per_text = [x[texts == text] for text in np.unique(texts)]
        pooled = np.array([z.mean(axis=0) for z in per_text])
        dataset = x if settings.dataset_rows == "tokens" else pooled
        curvatures = [c for c in map(curvature, per_text) if c is not None]
        prompts = [entropy(z @ z.T, settings.entropy_alpha) for z in per_text]
        previous = keeper.rows(layer - 1)[0] if layer else None
        records.append(
            {
                "layer": layer,
                "n_rows": len(x),
                "n_texts": len(per_text),
                "effective_rank": np.exp(-(p * np.log(p)).sum()),
                "alpha_req": -slope,
                "dataset_entropy": entropy(dataset @ dataset.T, settings.entropy_alpha),
                "prompt_entropy": np.mean(prompts),
                "curvature": np.mean(curvatures),
                "cka_previous": np.nan if previous is None else hsic_cka(previous, x),
                "cka_last": hsic_cka(x, last),
            }
        )
    table = pl.DataFrame(records)
    return table if settings.cka_against_last else table.drop("cka_last")


TOLERANCE = {"curvature": 1e-9}
"""Relative tolerances of the observer with float64 products against the references: 1e-12
(the sums, centred after summing, and the references agree to about 3e-14), and 1e-9 for
the curvature: at layer 0 a repeated token makes consecutive steps opposite, where arccos
turns a rounding of the cosine into √ε ≈ 1e-8 of angle (1.4e-10 of the mean measured)."""
FLOAT32_PRODUCTS = 1e-6
"""Relative tolerance of every quantity with float32 products (the default): 6e-8 at most
measured here (α-ReQ), 4e-7 on SmolLM2's states (``bench/extraction.py``)."""


def assert_tables_close(found: pl.DataFrame, expected: pl.DataFrame, rtol: float | None = None):
    assert found.columns == [
        c for c in ["layer", "n_rows", "n_texts", *QUANTITIES] if c in expected.columns
    ]
    for column in expected.columns:
        expected_values = expected[column].to_numpy()
        finite = np.isfinite(expected_values)
        assert finite[1:].all() and (finite[0] or column == "cka_previous"), column
        np.testing.assert_allclose(
            found[column].to_numpy(),
            expected_values,
            atol=0,
            err_msg=column,
            rtol=TOLERANCE.get(column, 1e-12) if rtol is None else rtol,
        )


def test_every_quantity_matches_its_reference_from_the_kept_states(tiny, float32_pass):
    (papers, other), keeper = float32_pass
    num_layers = tiny[1].num_layers
    expected = reference(keeper, PAPERS, num_layers)
    found = papers.table()
    assert_tables_close(found.drop("anisotropy"), expected, FLOAT32_PRODUCTS)
    assert_tables_close(other.table().drop("anisotropy"), reference(keeper, OTHER, num_layers))
    assert found["cka_last"][-1] == pytest.approx(1.0, abs=1e-14)
    # Not the same numbers under the other choices (the test above could not tell them).
    changed = ["alpha_req", "dataset_entropy", "prompt_entropy"]
    assert (np.abs(found[changed].to_numpy() - other.table()[changed].to_numpy()) > 1e-3).all()


def test_anisotropy_is_the_mean_cosine_over_distinct_token_pairs(tiny):
    observers, keeper, _ = passed(tiny, torch.float32, (PAPERS, EXACT), indices=[0, 1, 2])
    expected = []
    for layer in range(tiny[1].num_layers + 1):
        x, _ = keeper.rows(layer)
        cosines = [
            x[i] @ x[j] / (np.linalg.norm(x[i]) * np.linalg.norm(x[j]))
            for i, j in combinations(range(len(x)), 2)
        ]
        expected.append(np.mean(cosines))
    for observer, rtol in zip(observers, [FLOAT32_PRODUCTS, 1e-12], strict=True):
        np.testing.assert_allclose(observer.table()["anisotropy"].to_numpy(), expected, rtol=rtol)


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
    assert_tables_close(merged_shards(tiny, shards, tmp_path).table(), one_job.table(), 1e-12)


def test_a_resumed_observer_gives_the_same_table(tiny, float32_pass):
    (observer, _), _ = float32_pass
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
    assert_tables_close(split.table(), whole.table(), 1e-12)
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
    ) == pytest.approx(17.4e9 if settings.cka_against_last else 8.86e9, rel=0.005)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"entropy_alpha": 0}, "must be positive"),
        ({"dataset_rows": "prompts"}, "choose one of"),
        ({"alpha_req_ranks": (10, 5)}, "first < last"),
        ({"rankme_epsilon": -1}, ">= 0"),
    ],
)
def test_bad_settings_are_clear_errors(options, message):
    with pytest.raises(LayerlawsError, match=message):
        GeometrySettings(**options)
