"""Which prompts of a set keep their raw arrays on disk (``coupling.keep_arrays``): their
residual streams (``streams.npz``), top-K factors (``factors.npz``), coupling matrices
(``couplings.npz``) and token-wise coupling, a per-token array in table form
(``tokens.csv``: 3 T² rows per token layer pair, K and metric); every prompt keeps its
other table rows and its token-wise statistics (``token_means.csv``,
``layerlaws.coupling.token_means``). Torch-free: the job chooses the prompts with it, the
planner counts their bytes.

Aubry et al. draw the raw arrays of one prompt only: the trajectories of the paper's
prompt on their top principal components (Fig. 23; ``plot_pca`` reads the first prompt's
streams) and the coupling matrices of the first prompt whose Jacobians are measured
(Figs. 3 and 4; ``plot_depth_grid``, ``plot_token_grid``) and its token-wise coupling
(Fig. 4, ``plot_tokens``); every other number of theirs is
a statistic over prompts, which the tables hold. The figures' prompts are kept by default.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from layerlaws.text.corpus import prompt_datasets

FIGURES = "figures"
"""Keep the figures' prompts only (``figure_prompts``)."""
ALL = "all"
"""Keep every prompt's arrays."""


def figure_prompts(jacobians: Collection[int] | None) -> frozenset[int]:
    """The prompts whose arrays the figures read: the first (its trajectories, Fig. 23)
    and the first of ``jacobians`` (the prompts whose Jacobians are measured, None: every
    prompt; its coupling matrices, Figs. 3 and 4)."""
    first_coupled = [] if jacobians is None else sorted(jacobians)[:1]
    return frozenset({0, *first_coupled})


def kept_prompts(keep: int | str, count: int, jacobians: Collection[int] | None) -> frozenset[int]:
    """The prompts of a set of ``count`` whose arrays are written under ``keep``
    (``coupling.keep_arrays``): ``all``, every one; ``figures``, ``figure_prompts``; a
    count N, the first N and the figures' prompts (so that every figure is made)."""
    if keep == ALL:
        return frozenset(range(count))
    first = range(min(keep, count)) if keep != FIGURES else range(0)
    return frozenset(index for index in figure_prompts(jacobians) | set(first) if index < count)


def planned_kept(keep: int | str, prompt_set: Mapping[str, Any], count: int) -> int:
    """At most how many of the ``count`` prompts of ``prompt_set`` keep their arrays under
    ``keep``, before its prompts are drawn: the first prompt and, where it may not be one
    whose Jacobians are measured (a draw from the datasets without texts of the set's
    own), the first that is; under a count N, N of them."""
    if keep == ALL:
        return count
    first_coupled = (
        prompt_set["jacobian_prompts"] is None
        or not prompt_datasets(prompt_set)
        or bool(prompt_set["texts"])
        or prompt_set["jacobian_draw"] == "first"
    )
    figures = 1 if first_coupled else 2
    return min(count, figures if keep == FIGURES else keep + figures - 1)
