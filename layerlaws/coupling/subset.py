"""The prompts of a coupling prompt set whose Jacobians are measured
(``coupling.prompts.<set>``: ``jacobian_prompts``, ``jacobian_draw``, ``jacobian_seed``).

Aubry et al. average the coupling over prompts of the six leaderboard datasets (§4.2,
§5.4) and computed it "on a smaller subset of the 1,200 prompts" (Appendix A.6), whose
size and draw they do not give. ``per_dataset`` (the default) draws that subset across the
set's datasets: the set's own ``texts`` first (the paper's prompt, which Figs. 3, 4 and 17
draw), then the same number of prompts from each dataset, (``jacobian_prompts`` − texts) /
datasets, drawn without replacement by a generator of its own per dataset, seeded with
(``jacobian_seed``, the dataset's position in the set's ``dataset`` list): a dataset's draw
does not depend on the others'. ``first`` takes the first ``jacobian_prompts`` prompts (the
texts, then the first dataset's). The other prompts have their trajectories measured only.

Torch-free: the checks before the first job and the rehearsal's division of the counts use
it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from layerlaws.text.corpus import prompt_datasets

log = logging.getLogger(__name__)

JACOBIAN_DRAWS = ("per_dataset", "first")
"""The values of ``jacobian_draw``."""


def per_dataset_count(prompt_set: Mapping[str, Any]) -> int | None:
    """The prompts drawn from each dataset of ``prompt_set`` under ``per_dataset``:
    (``jacobian_prompts`` − its own texts) // its datasets, 0 when its texts fill the
    count; None when every prompt has its Jacobians (``jacobian_prompts`` null), under
    ``first``, or when it has no datasets."""
    count, datasets = prompt_set["jacobian_prompts"], prompt_datasets(prompt_set)
    if count is None or prompt_set["jacobian_draw"] != "per_dataset" or not datasets:
        return None
    return max(count - len(prompt_set["texts"]), 0) // len(datasets)


def subset_problem(name: str, prompt_set: Mapping[str, Any]) -> str | None:
    """What is wrong with the Jacobian subset of the prompt set ``name``, or None: under
    ``per_dataset`` the count must leave each dataset the same number of prompts, and no
    more than the ``n_from_dataset`` it gives."""
    each = per_dataset_count(prompt_set)
    if each is None:
        return None
    texts, datasets = len(prompt_set["texts"]), len(prompt_datasets(prompt_set))
    count, most = prompt_set["jacobian_prompts"], prompt_set["n_from_dataset"]
    key = f"coupling.prompts.{name}.jacobian_prompts"
    if count > texts and (count - texts) % datasets:
        return (
            f"{key} is {count}: after its {texts} texts, {count - texts} prompts do not split "
            f"into the same number from each of its {datasets} datasets (jacobian_draw: "
            f"per_dataset); choose {texts + datasets * each} or {texts + datasets * (each + 1)}, "
            f"or jacobian_draw: first"
        )
    if each > most:
        return (
            f"{key} is {count}: {each} prompts from each dataset, more than its n_from_dataset "
            f"{most}; choose at most {texts + datasets * most}, or raise n_from_dataset"
        )
    return None


def largest_valid_count(prompt_set: Mapping[str, Any]) -> int | None:
    """The largest ``jacobian_prompts`` no larger than the set's own that ``subset_problem``
    accepts (the rehearsal divides the counts, which can leave a remainder)."""
    each = per_dataset_count(prompt_set)
    count = prompt_set["jacobian_prompts"]
    if each is None or count <= len(prompt_set["texts"]):
        return count
    each = min(each, prompt_set["n_from_dataset"])
    return len(prompt_set["texts"]) + len(prompt_datasets(prompt_set)) * each


def jacobian_indices(
    prompt_set: Mapping[str, Any], sources: Sequence[str | None]
) -> list[int] | None:
    """The indices, ascending, of the prompts whose Jacobians are measured, for prompts
    whose datasets are ``sources`` in order (None: one of the set's own ``texts``; the
    prompts ``layerlaws.text.corpus.prompt_sources`` gives, less any dropped as too long);
    None when every prompt has them. A dataset with fewer prompts than its share gives
    them all (logged)."""
    count = prompt_set["jacobian_prompts"]
    if count is None:
        return None
    if prompt_set["jacobian_draw"] == "first" or not prompt_datasets(prompt_set):
        return list(range(min(count, len(sources))))
    chosen = [index for index, source in enumerate(sources) if source is None][:count]
    each = per_dataset_count(prompt_set)
    for position, dataset in enumerate(prompt_datasets(prompt_set)):
        candidates = np.array([i for i, source in enumerate(sources) if source == dataset])
        if len(candidates) < each:
            log.warning(
                "dataset %s has %d prompts, fewer than the %d whose Jacobians are drawn from "
                "each dataset: all of them are measured",
                dataset,
                len(candidates),
                each,
            )
        generator = np.random.default_rng((prompt_set["jacobian_seed"], position))
        picked = generator.choice(candidates, min(each, len(candidates)), replace=False)
        chosen += [int(index) for index in picked]
    return sorted(chosen)
