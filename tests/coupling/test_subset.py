"""The prompts whose Jacobians are measured (``layerlaws.coupling.subset``): under
``per_dataset`` the set's own texts first, then the same number from each dataset, seeded;
under ``first`` the first N; the counts a draw cannot honour stop the run before its first
job (and the rehearsal's divided counts stay ones it can)."""

from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats

from layerlaws.core.errors import LayerlawsError
from layerlaws.coupling.subset import (
    jacobian_indices,
    largest_valid_count,
    per_dataset_count,
    subset_problem,
)
from layerlaws.coupling.workflow import check_coupling
from layerlaws.rehearsal.counts import divided_counts

DATASETS = ["arc", "gsm8k", "hellaswag", "mmlu", "truthfulqa", "winogrande"]


def leaderboard(**changes) -> dict:
    """The paper config's leaderboard set, as the schema fills it in."""
    return {
        "texts": ["What is the capital of France? The capital is"],
        "dataset": DATASETS,
        "n_from_dataset": 200,
        "max_tokens": 128,
        "too_long": "truncate",
        "jacobian_prompts": 103,
        "jacobian_draw": "per_dataset",
        "jacobian_seed": 0,
    } | changes


def sources_of(prompt_set: dict, per_dataset: int | None = None) -> list[str | None]:
    """The dataset of each prompt of a set, as a job finds them: its texts (None), then
    ``per_dataset`` (n_from_dataset unless given) of each dataset."""
    count = prompt_set["n_from_dataset"] if per_dataset is None else per_dataset
    return [None] * len(prompt_set["texts"]) + [d for d in DATASETS for _ in range(count)]


def test_the_paper_prompt_first_then_the_same_number_from_each_dataset():
    prompt_set = leaderboard()
    sources = sources_of(prompt_set)
    chosen = jacobian_indices(prompt_set, sources)
    assert len(chosen) == 103 and len(set(chosen)) == 103
    assert chosen == sorted(chosen) and chosen[0] == 0 and sources[0] is None
    by_dataset = Counter(sources[index] for index in chosen)
    assert by_dataset == {None: 1, **dict.fromkeys(DATASETS, 17)}
    # Not the first 17 of each dataset, nor the first 103 prompts.
    assert chosen != list(range(103))
    arc = [index for index in chosen if sources[index] == "arc"]
    assert arc != list(range(1, 18))


def test_the_draw_is_seeded():
    prompt_set = leaderboard()
    sources = sources_of(prompt_set)
    first = jacobian_indices(prompt_set, sources)
    assert jacobian_indices(prompt_set, sources) == first
    other = jacobian_indices(leaderboard(jacobian_seed=1), sources)
    assert other != first and other[0] == 0
    assert Counter(sources[index] for index in other) == Counter(sources[i] for i in first)


def test_a_datasets_draw_does_not_depend_on_the_others():
    """Fewer prompts of ARC (a shorter sample) leave the other datasets' draws as they were
    (each dataset has its own generator), and ARC gives them all (logged)."""
    prompt_set = leaderboard()
    sources = sources_of(prompt_set)
    full = jacobian_indices(prompt_set, sources)
    short = [None] + ["arc"] * 10 + sources[1 + 200 :]
    shifted = jacobian_indices(prompt_set, short)
    assert [i for i in shifted if short[i] == "arc"] == list(range(1, 11))
    assert [i - 10 for i in shifted if short[i] not in (None, "arc")] == [
        i - 200 for i in full if sources[i] not in (None, "arc")
    ]


def test_each_prompt_of_a_dataset_is_drawn_alike():
    """Over 400 seeds, each of a dataset's 20 prompts is among its 5 drawn in 5/20 of
    them, within 5 standard deviations of the binomial count."""
    prompt_set = leaderboard(dataset=["arc"], texts=[], n_from_dataset=20, jacobian_prompts=5)
    counts = np.zeros(20)
    seeds = 400
    for seed in range(seeds):
        chosen = jacobian_indices(prompt_set | {"jacobian_seed": seed}, ["arc"] * 20)
        assert len(chosen) == 5
        counts[chosen] += 1
    spread = 5 * np.sqrt(seeds * 0.25 * 0.75)
    assert np.all(np.abs(counts - seeds * 0.25) < spread), counts
    assert stats.chisquare(counts).pvalue > 1e-4


def test_first_null_and_no_datasets():
    sources = sources_of(leaderboard())
    assert jacobian_indices(leaderboard(jacobian_draw="first"), sources) == list(range(103))
    assert jacobian_indices(leaderboard(jacobian_prompts=None), sources) is None
    own = leaderboard(dataset=None, texts=["a b", "c d", "e f"], jacobian_prompts=2)
    assert jacobian_indices(own, [None] * 3) == [0, 1]
    assert per_dataset_count(own) is None
    # A count within the texts takes the first texts only.
    assert jacobian_indices(leaderboard(jacobian_prompts=1), sources) == [0]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"jacobian_prompts": 100},
            r"jacobian_prompts is 100: after its 1 texts, 99 prompts do not split into the "
            r"same number from each of its 6 datasets .* choose 97 or 103, or jacobian_draw",
        ),
        (
            {"jacobian_prompts": 103, "n_from_dataset": 10},
            r"jacobian_prompts is 103: 17 prompts from each dataset, more than its "
            r"n_from_dataset 10; choose at most 61",
        ),
    ],
)
def test_a_count_the_draw_cannot_honour_stops_the_run(changes, message):
    prompt_set = leaderboard(**changes)
    assert subset_problem("leaderboard", prompt_set) is not None
    expanded = SimpleNamespace(
        config={"datasets": {key: {} for key in DATASETS}},
        prompt_sets={"leaderboard": prompt_set},
        coupling_runs=[],
        models={},
    )
    with pytest.raises(LayerlawsError, match="config coupling.prompts.leaderboard." + message):
        check_coupling(expanded)


def test_valid_counts_pass():
    for changes in (
        {},
        {"jacobian_prompts": 1},
        {"jacobian_draw": "first", "jacobian_prompts": 100},
    ):
        assert subset_problem("leaderboard", leaderboard(**changes)) is None


def test_the_rehearsals_divided_counts_stay_drawable():
    """⌈103 / 10⌉ = 11 leaves 10 prompts for 6 datasets: the rehearsal takes 7 (1 + 6 × 1),
    a count the draw honours; ⌈103 / 1000⌉ = 1, the paper's prompt alone."""
    for factor, expected in ((10, 7), (1000, 1), (2, 1 + 6 * 8)):
        config = {
            "rehearsal": {"divide_counts_by": factor},
            "datasets": {},
            "coupling": {"prompts": {"leaderboard": leaderboard()}},
            "training": {},
            "synthetic": {"n_samples": 10, "epochs": 10, "snapshot_epoch": 5},
        }
        prompt_set = divided_counts(config)["coupling"]["prompts"]["leaderboard"]
        assert prompt_set["jacobian_prompts"] == expected, factor
        assert subset_problem("leaderboard", prompt_set) is None
    assert largest_valid_count(leaderboard(jacobian_prompts=None)) is None
