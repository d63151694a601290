"""The geometry observer's default quantities are their authors' definitions
(``authors_reference``, written from the released code): on a tiny Llama's states, on
hand-made states where the definitions disagree (a shared offset, a repeated token,
one- and two-token texts, texts alike within and unlike between, more texts than
dimensions, across shards and a resume), and not any plausible wrong definition."""

import io
from collections.abc import Callable

import authors_reference as ref
import geometry_fixtures
import numpy as np
import pytest
import torch
from geometry_passes import ARCCOS, EXACT, PAPERS, HandMade, assert_tables_close, reference

from layerlaws.forward.model_pass import progress_of, restore
from layerlaws.geometry.observer import GeometryObserver
from layerlaws.geometry.settings import GeometrySettings

float32_pass = pytest.fixture(scope="module")(geometry_fixtures.float32_pass)
tiny = pytest.fixture(scope="module")(geometry_fixtures.tiny)

FLOAT32_PRODUCTS = {
    "effective_rank": 1e-6,
    "alpha_req": 1e-6,
    "prompt_entropy": 1e-6,
    "dataset_entropy": 1e-6,
    "curvature": 1e-6,
    "cka_previous": 1e-6,
    "cka_last": 1e-6,
}
"""Relative tolerances of the default (float32 products) against the references, 1e-12 for
the columns not named. The texts' states are normalised in float32 from the states shifted
by the layer's fixed shift (rounded relative to their spread, ~2⁻²⁴), so each unit vector,
each step and each text's mean row round by about 1e-7; the texts' Gram matrices are
float32 products of those unit vectors (and their eigenvalues float32 too): each entry
rounds by about √d·2⁻²⁴ ≈ 3e-7 (d = 24), moving the prompt entropy (about 2 nats), the
dataset entropy and the mean angle by a few 1e-7 at most; the CKA's cross-moments are
float32 products of the shifted states, and so is the second moment (RankMe, α-ReQ) of
the layers past 0 once they have seen d rows (1.4e-9 measured). The unit vectors of the
anisotropy are float64, to 1e-12."""
FLOAT64 = {"product_dtype": "float64", "alpha_req_ranks": (2, 6)}
"""The hand-made cases' settings besides the defaults: float64 products (the definitions
compared to 1e-12) and α-ReQ fitted to ranks 2..6 (d = 6; the default 6..100 would leave
one rank and NaN)."""
EXACT_HAND = GeometrySettings(**FLOAT64)
"""The defaults with ``FLOAT64``."""
HAND_MADE = {"curvature": ARCCOS, "alpha_req": 1e-10, "dataset_entropy": 1e-10}
"""Relative tolerances of the hand-made cases, 1e-12 for the columns not named: the
curvature's (``ARCCOS``) and α-ReQ's: its covariance is the second moment less n x̄x̄ᵀ, so
an eigenvalue λ_r rounds by about ε‖Σxxᵀ‖, relative ε‖Σxxᵀ‖/λ_r; with a shared offset
and a steep spectrum (α ≈ 7 on ranks 2..6) that is ~1e-11 on log λ_6, 3e-12 of α
measured; and the raw dataset entropy's (``prompt_states: raw``): the texts' mean rows
carry the shared offset, so the Gram matrix's smaller eigenvalues round relative to it
(1.2e-12 measured)."""


def test_every_default_quantity_matches_the_authors_definition(tiny, float32_pass):
    """The default table (float32 products) on the tiny Llama's states equals the authors'
    definitions computed in float64 from the same states (see ``FLOAT32_PRODUCTS``)."""
    (papers, _, _), keeper = float32_pass
    expected = reference(keeper.rows, PAPERS, tiny[1].num_layers)
    assert_tables_close(papers.table(), expected, FLOAT32_PRODUCTS)
    assert papers.table()["cka_last"][-1] == pytest.approx(1.0, abs=1e-14)


def test_float64_products_match_the_authors_definition_to_rounding(tiny, float32_pass):
    """With ``product_dtype: float64`` every column agrees to 1e-12, the curvature to
    ``ARCCOS``."""
    (_, _, exact), keeper = float32_pass
    expected = reference(keeper.rows, EXACT, tiny[1].num_layers)
    assert_tables_close(exact.table(), expected, {"curvature": ARCCOS})


def random_texts(seed, lengths, width=6, offset=0.0, noise=1.0) -> list[np.ndarray]:
    """Texts of ``lengths`` tokens, each state a shared offset (``offset`` long) plus
    Gaussian ``noise``."""
    rng = np.random.default_rng(seed)
    centre = rng.normal(size=width)
    centre *= offset / np.linalg.norm(centre)
    return [centre + noise * rng.normal(size=(length, width)) for length in lengths]


def next_layer(texts: list[np.ndarray], seed: int) -> list[np.ndarray]:
    """A second layer: a fixed nonlinear map of the first, with an offset."""
    rng = np.random.default_rng(seed)
    weights, shift = rng.normal(size=(texts[0].shape[1],) * 2), rng.normal(size=3)
    return [np.tanh(text @ weights) + np.resize(shift, text.shape[1]) for text in texts]


def table_of(case: HandMade, settings: GeometrySettings, batches=None):
    return case.observed(settings, batches).table()


def assert_matches_reference(case: HandMade, settings: GeometrySettings, batches=None):
    """The observer of ``settings`` fed ``case`` (in ``batches``) gives the references'
    table (float64 products; to ``HAND_MADE``); returns it."""
    found = table_of(case, settings, batches)
    expected = reference(case.rows, settings, case.num_layers)
    assert_tables_close(found, expected, HAND_MADE)
    return found


def test_a_shared_offset_separates_normalized_from_raw_entropies():
    """Every token a shared offset (10 long) plus small noise (0.1), d = 6, texts of 3 to 8
    tokens (some longer than d: ZᵀZ): the normalised states see the noise, near
    log(min(T, d)) nats, the raw ones the offset, near 0; each matches its definition."""
    case = HandMade([random_texts(1, [4, 5, 8, 3, 7], offset=10, noise=0.1)])
    normalized = assert_matches_reference(case, EXACT_HAND)
    raw = assert_matches_reference(case, GeometrySettings(prompt_states="raw", **FLOAT64))
    for column in ("prompt_entropy", "dataset_entropy"):
        assert normalized[column][0] - raw[column][0] > 1.0, column


def repeated(texts: list[np.ndarray], at: int = 2) -> list[np.ndarray]:
    """The texts with token ``at`` a copy of the one before (a zero step)."""
    texts = [text.copy() for text in texts]
    for text in texts:
        text[at] = text[at - 1]
    return texts


def curvature_of(angle, zero_step, short) -> Callable[[np.ndarray], float | None]:
    """A text's mean angle with ``angle(cos)``; a zero step's angle ``zero_step`` (None:
    left out), a text without an angle ``short`` (None: left out)."""

    def text_curvature(z):
        angles = []
        for k in range(1, len(z) - 1):
            before, after = z[k] - z[k - 1], z[k + 1] - z[k]
            norms = np.linalg.norm(before) * np.linalg.norm(after)
            if norms:
                angles.append(angle(np.clip(before @ after / norms, -1, 1)))
            elif zero_step is not None:
                angles.append(zero_step)
        return np.mean(angles) if angles else short

    return text_curvature


def test_a_repeated_token_is_angle_zero_by_default_and_left_out_when_signed():
    """Two consecutive identical states make a zero step: the default (|cos|) counts its
    two angles as 0, ``signed`` leaves them out; each matches its definition, and neither
    is the mean with the zero step's angles treated the other way."""
    case = HandMade([repeated(random_texts(2, [5, 6, 7, 4]))])
    absolute = assert_matches_reference(case, EXACT_HAND)["curvature"][0]
    signed = assert_matches_reference(case, GeometrySettings(curvature_angle="signed", **FLOAT64))
    texts = [ref.normalize(z) for z in case.states[0]]
    absolute_without = np.mean([*map(curvature_of(lambda c: np.arccos(abs(c)), None, 0.0), texts)])
    signed_with = np.mean([*map(curvature_of(np.arccos, 0.0, None), texts)])
    assert absolute_without - absolute > 0.05
    assert signed["curvature"][0] - signed_with > 0.05


def test_one_and_two_token_texts_follow_the_documented_behaviour():
    """Texts of 1, 2, 5 and 7 tokens (d = 6): the one-token text's normalised state is
    zero, so it has no prompt entropy (left out of the mean, not NaN) and a zero row in
    the dataset entropy's matrix (adds nothing); the two-token text's states are ±u, a
    Gram matrix [[1, −1], [−1, 1]] clipped to the identity: log 2 nats, a zero mean row;
    both have curvature 0, counted in the mean over the four texts."""
    case = HandMade([random_texts(3, [1, 2, 5, 7], offset=2)])
    found = assert_matches_reference(case, EXACT_HAND)
    longer = [ref.normalize(z) for z in case.states[0][2:]]
    entropies = [ref.compute_entropy(z, 1.0) for z in longer]
    assert found["n_texts"][0] == 4
    assert found["prompt_entropy"][0] == pytest.approx(np.mean([np.log(2), *entropies]), 1e-12)
    curvatures = [ref.compute_curvature(z) for z in longer]
    assert found["curvature"][0] == pytest.approx(sum(curvatures) / 4, 1e-12)
    assert found["dataset_entropy"][0] == pytest.approx(
        ref.compute_entropy(np.array([z.mean(axis=0) for z in longer]), 1.0), 1e-12
    )


def test_rankme_of_a_layer_of_lower_rank_than_d_is_near_the_singular_values():
    """States in a 3-dimensional subspace of d = 6, with and without an offset: RankMe
    (the default, float32 products) agrees with the SVD's to rounding: the second moment's
    zero eigenvalues come out as rounding, ~ε‖ZᵀZ‖, below the d·ε·λ_max floor, so their
    square roots (~1e-8 σ_max, 1.1e-7 of RankMe without the floor) do not count as
    singular values; α-ReQ, fitted to ranks ≤ 3 here, is exact."""
    rng = np.random.default_rng(9)
    basis = rng.normal(size=(3, 6))
    for offset in (0.0, 5.0):
        case = HandMade([[rng.normal(size=(n, 3)) @ basis + offset for n in (5, 6, 7, 8)]])
        found = table_of(case, GeometrySettings(alpha_req_ranks=(1, 3)))
        x, _ = case.rows(0)
        assert found["effective_rank"][0] == pytest.approx(ref.rankme(x), rel=1e-12)
        assert found["alpha_req"][0] == pytest.approx(ref.alpha_req(x, (1, 3)), rel=1e-12)


def test_rankme_stays_exact_at_every_layer_over_fewer_rows_than_d():
    """Two layers of d = 8 over 7 rows in two batches (so rank 7 < d at both): the second
    moment of a layer that has seen fewer than d rows is made in float64 products
    whatever ``product_dtype`` says, so RankMe agrees with the SVD's to rounding at layer 1
    too (float32 products there leave a spurious singular value: 2e-10 of RankMe here,
    3.7e-4 on SmolLM2's layer 0 over 12 texts); past d rows float32 products take over."""
    rng = np.random.default_rng(11)
    layers = [[rng.normal(size=(n, 8)) + 3.0 for n in (3, 4)] for _ in range(2)]
    case = HandMade(layers)
    found = table_of(case, GeometrySettings(alpha_req_ranks=(1, 3)), batches=[[0], [1]])
    for layer in (0, 1):
        x, _ = case.rows(layer)
        assert found["effective_rank"][layer] == pytest.approx(ref.rankme(x), rel=1e-12)


def test_anisotropy_is_over_tokens_of_other_texts_by_default():
    """Each text's tokens near its own axis plus a shared direction (5 e_t + 2 e_5 + noise
    0.3): tokens of one text have cosines near 1, of different texts near 4/29; the default
    (``other_texts``) is near 0.14, ``all`` well above it, each matches its definition
    (a mean cosine near 0 would lose its relative digits to the cancellation of
    |Σu|² − Σ_t |Σ_t u|²)."""
    rng = np.random.default_rng(4)
    texts = [
        5 * np.eye(6)[t] + 2 * np.eye(6)[5] + 0.3 * rng.normal(size=(3 + t, 6)) for t in range(4)
    ]
    case = HandMade([texts])
    other_texts = assert_matches_reference(case, EXACT_HAND)["anisotropy"][0]
    every_pair = assert_matches_reference(case, GeometrySettings(anisotropy_pairs="all", **FLOAT64))
    assert 0.05 < other_texts < 0.25
    assert every_pair["anisotropy"][0] - other_texts > 0.1


TEN_TEXTS = [2, 5, 8, 3, 7, 4, 6, 9, 3, 5]
"""Tokens of 10 texts of d = 6: the dataset entropy's rows outnumber d from the 7th."""
BATCHES = [[0, 1, 2], [3, 4, 5, 6], [7, 8, 9]]
"""The one job's batches: 3 rows (ZZᵀ), then 7 (ZᵀZ from here), then 10."""


@pytest.fixture(scope="module")
def ten_texts() -> HandMade:
    """Two layers of 10 texts, d = 6 (a shared offset 2, noise 1)."""
    first = random_texts(5, TEN_TEXTS, offset=2)
    return HandMade([first, next_layer(first, 6)])


def test_more_texts_than_dimensions_switch_to_the_clipped_transposed_gram(ten_texts):
    """Fed in three batches, the dataset entropy's rows pass d in the second: the matrix
    becomes ZᵀZ (clipped), as the authors' compute_entropy takes it when N > D; every
    column matches the definitions (and with 6 texts, N = D, on ZZᵀ), and the dataset
    entropy is not that of ZZᵀ clipped."""
    found = assert_matches_reference(ten_texts, EXACT_HAND, BATCHES)
    six = HandMade([layer[:6] for layer in ten_texts.states])  # N = D: still ZZᵀ
    assert_matches_reference(six, EXACT_HAND, [[0, 1, 2], [3, 4, 5]])
    for layer in range(2):
        x, texts = ten_texts.rows(layer)
        rows = np.array([ref.normalize(z).mean(axis=0) for z in ref.per_text(x, texts)])
        gram = (rows @ rows.T).clip(min=0)
        wrong = ref.matrix_alpha_entropy(gram / np.trace(gram), 1.0)
        assert abs(found["dataset_entropy"][layer] - wrong) > 1e-3


def test_shards_merge_across_the_switch_into_the_one_job_table(ten_texts):
    """Shards of 5 and 5 texts (each holds its rows, ≤ d; merged, 10 rows make ZᵀZ) and of
    2 and 8 texts (rows merged into the other's ZᵀZ): the one job's table."""
    one_job = table_of(ten_texts, EXACT_HAND, BATCHES)
    for first, second in [
        ([[0, 1], [2, 3, 4]], [[5, 6, 7], [8, 9]]),
        ([[5, 9]], [[0, 1, 2, 3], [4, 6, 7, 8]]),
    ]:
        merged = ten_texts.observed(EXACT_HAND, first)
        merged.merge_(ten_texts.observed(EXACT_HAND, second))
        assert_tables_close(merged.table(), one_job, HAND_MADE)


def test_a_resume_before_the_switch_gives_the_one_job_table(ten_texts):
    """Saved after the first batch (3 rows held), restored into a new observer that then
    sees the other two batches (passing d): the one job's table."""
    saved = ten_texts.observed(EXACT_HAND, BATCHES[:1])
    buffer = io.BytesIO()
    torch.save(progress_of(saved), buffer)
    buffer.seek(0)
    resumed = GeometryObserver(EXACT_HAND, ten_texts.num_layers)
    restore(resumed, torch.load(buffer, weights_only=False))
    ten_texts.feed(resumed, BATCHES[1:])
    assert_tables_close(resumed.table(), table_of(ten_texts, EXACT_HAND, BATCHES), HAND_MADE)


def unit_rows(z: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length, not centred."""
    return z / np.linalg.norm(z, axis=1, keepdims=True)


def entropy_unclipped(z: np.ndarray) -> float | None:
    return ref.compute_entropy(z, 1.0, clip=False)


def per_text_mean(values) -> float:
    return float(np.mean([value for value in values if value is not None]))


def power_law(eigen: np.ndarray, x: np.ndarray, ranks, weighted: bool) -> float:
    """−slope of log λ_r on log r over ``ranks`` (cut to min(d, n − 1)), weighted by 1/r."""
    rank = np.arange(ranks[0], min(ranks[1], x.shape[1], len(x) - 1) + 1)
    weights = rank**-0.5 if weighted else None  # polyfit weighs the residuals: 1/r squared
    return -np.polyfit(np.log(rank), np.log(eigen[rank - 1]), 1, w=weights)[0]


def descending(matrix: np.ndarray) -> np.ndarray:
    return np.linalg.eigvalsh(matrix)[::-1]


WRONG = {
    "effective_rank centred": lambda x, t, s: ref.rankme(x - x.mean(axis=0), s.rankme_epsilon),
    "alpha_req unweighted fit": lambda x, t, s: power_law(
        descending(np.cov(x.T)), x, s.alpha_req_ranks, weighted=False
    ),
    "alpha_req uncentred": lambda x, t, s: power_law(
        descending(x.T @ x), x, s.alpha_req_ranks, weighted=True
    ),
    "dataset_entropy raw rows": lambda x, t, s: ref.dataset_entropy(x, t, normalized=False),
    "dataset_entropy unclipped": lambda x, t, s: entropy_unclipped(
        np.array([ref.normalize(z).mean(axis=0) for z in ref.per_text(x, t)])
    ),
    "prompt_entropy raw states": lambda x, t, s: ref.prompt_entropy(x, t, normalized=False),
    "prompt_entropy not centred": lambda x, t, s: per_text_mean(
        ref.compute_entropy(unit_rows(z), 1.0) for z in ref.per_text(x, t)
    ),
    "prompt_entropy unclipped": lambda x, t, s: per_text_mean(
        entropy_unclipped(ref.normalize(z)) for z in ref.per_text(x, t)
    ),
    "prompt_entropy one-token text as 0": lambda x, t, s: np.mean(
        [ref.compute_entropy(ref.normalize(z), 1.0) or 0.0 for z in ref.per_text(x, t)]
    ),
    "curvature signed cosine": lambda x, t, s: per_text_mean(
        map(curvature_of(np.arccos, 0.0, 0.0), map(ref.normalize, ref.per_text(x, t)))
    ),
    "curvature zero steps left out": lambda x, t, s: per_text_mean(
        map(
            curvature_of(lambda c: np.arccos(abs(c)), None, 0.0),
            map(ref.normalize, ref.per_text(x, t)),
        )
    ),
    "curvature short texts left out": lambda x, t, s: per_text_mean(
        map(
            curvature_of(lambda c: np.arccos(abs(c)), 0.0, None),
            map(ref.normalize, ref.per_text(x, t)),
        )
    ),
    "curvature raw states": lambda x, t, s: ref.curvature(x, t, normalized=False),
    "anisotropy all pairs": lambda x, t, s: ref.anisotropy(x, t, "all"),
}
"""Plausible wrong definitions of a column (``"column what"``), from a layer's rows x,
their texts t and the settings s."""


@pytest.fixture(scope="module")
def mixed() -> HandMade:
    """Two layers of the 10 texts of ``TEN_TEXTS`` (one of 2 tokens) and a one-token text,
    a repeated token in each text of 4 or more, with a shared offset: every definition
    above differs from the right one here."""
    first = random_texts(7, [*TEN_TEXTS, 1], offset=3)
    first = [repeated([z])[0] if len(z) >= 4 else z for z in first]
    return HandMade([first, next_layer(first, 8)])


@pytest.fixture(scope="module")
def mixed_table(mixed):
    """The observer's table of ``mixed`` (``EXACT_HAND``), checked against the definitions."""
    return assert_matches_reference(mixed, EXACT_HAND, [[0, 1, 2, 10], [3, 4, 5, 6], [7, 8, 9]])


@pytest.mark.parametrize("wrong", WRONG, ids=WRONG)
def test_the_table_is_not_a_plausible_wrong_definition(mixed, mixed_table, wrong):
    """Each wrong definition is off by more than 1e-4 relative (1e8 times the tolerance)
    at every layer: the tests above would catch it."""
    column = wrong.split()[0]
    for layer in range(mixed.num_layers + 1):
        value = WRONG[wrong](*mixed.rows(layer), EXACT_HAND)
        found = mixed_table[column][layer]
        assert np.isfinite(value) and np.isfinite(found)
        assert abs(found - value) > 1e-4 * abs(value), (layer, found, value)


def test_cka_is_not_of_uncentred_states(mixed, mixed_table):
    """Linear CKA of the uncentred Gram matrices (no H·H) is off by more than 1e-3."""
    x, y = mixed.rows(0)[0], mixed.rows(1)[0]
    k, l = x @ x.T, y @ y.T  # noqa: E741
    uncentred = (k * l).sum() / np.sqrt((k * k).sum() * (l * l).sum())
    assert abs(mixed_table["cka_previous"][1] - uncentred) > 1e-3
    assert mixed_table["cka_previous"][1] == pytest.approx(ref.linear_cka(x, y), 1e-12)
