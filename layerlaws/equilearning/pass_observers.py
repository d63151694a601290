"""The observers of an equi-learning pass, built from its tokens table and settings, and
the tables they write: the PR statistics (He & Su's law), separation fuzziness (Fig. S8),
the token views (Fig. 2, S1–S6), the held-out evaluation of the model's own head, and the
named observers (``equilearning.observers``: the built-in geometry, a researcher's own;
``layerlaws.forward.observers``), one table each."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from layerlaws.core.errors import LayerlawsError
from layerlaws.equilearning.evaluation import HeldOutEvaluation
from layerlaws.equilearning.fuzziness import SeparationFuzziness, counted_classes
from layerlaws.equilearning.settings import EquilearningSettings
from layerlaws.equilearning.statistics import EquilearningStatistics, present_ids
from layerlaws.equilearning.token_views import (
    TokenViews,
    ViewedRows,
    default_layers,
    word_token_ids,
)
from layerlaws.forward.masking import TARGET_OFFSETS, probe_of
from layerlaws.forward.model_pass import LogitObserver, Observer
from layerlaws.forward.observers import NamedObserver, ObserverSpec
from layerlaws.models.facts import ModelFacts
from layerlaws.text.spans import token_spans, tokenizer_fingerprint

log = logging.getLogger(__name__)


@dataclass
class PassObservers:
    """The observers of one pass (or one shard of it): the four of He & Su's measures and
    the named ones."""

    statistics: EquilearningStatistics
    fuzziness: SeparationFuzziness
    views: TokenViews
    evaluation: HeldOutEvaluation
    evaluated: bool
    """Whether the model's head is evaluated (``evaluation`` observes the logits); if not,
    its table is one row of NaN."""
    named: dict[str, NamedObserver] = field(default_factory=dict)
    """The named observers by name, in the config's order."""

    @classmethod
    def build(
        cls,
        tokens: pl.DataFrame,
        facts: ModelFacts,
        tokenizer: Any,
        settings: EquilearningSettings,
        probe: str,
        named: Sequence[ObserverSpec] = (),
        fuzziness_host_bytes: int | None = None,
    ) -> PassObservers:
        """Observers of a pass over ``tokens`` (a probed tokens table,
        ``layerlaws.forward.masking.probe_tokens``) under ``probe``, with the ``named``
        observers; the separation fuzziness's open class sums beyond
        ``fuzziness_host_bytes`` of host memory on the scratch disk (None: none)."""
        target_offset = TARGET_OFFSETS[probe]
        present = present_ids(tokens, settings.offsets) if settings.shuffle == "present" else None
        statistics = EquilearningStatistics(
            facts,
            settings.offsets,
            settings.norms,
            settings.controls,
            settings.shuffle_seed,
            present,
        )
        # The head is evaluated on its own task only: not an encoder saved without its
        # masked-LM head, nor an encoder's head on next tokens.
        evaluated = facts.lm_head_trained and probe == probe_of("auto", facts.model_type)
        evaluation = HeldOutEvaluation(
            target_offset,
            token_spans(tokens, tokenizer) if evaluated else None,
            tokenizer_fingerprint(tokenizer),
        )
        names = [spec.name for spec in named]
        if len(set(names)) < len(names):
            raise LayerlawsError(f"the named observers {names} repeat a name; give each its own")
        classes = counted_classes(tokens, settings.fuzziness, target_offset)
        views = settings.token_views
        return cls(
            statistics,
            SeparationFuzziness(
                facts, settings.norms, classes, target_offset, fuzziness_host_bytes
            ),
            TokenViews(
                facts,
                ViewedRows.choose(tokens, word_token_ids(views.groups, tokenizer), views.max_rows),
                views.layers or default_layers(facts.num_layers),
                views.norm,
            ),
            evaluation,
            evaluated,
            {spec.name: spec.build(facts.num_layers) for spec in named},
        )

    @property
    def observers(self) -> list[Observer]:
        """Those that observe the layers' states."""
        return [self.statistics, self.fuzziness, self.views, *self.named.values()]

    @property
    def logit_observers(self) -> list[LogitObserver]:
        """Those that observe the logits."""
        return [self.evaluation] if self.evaluated else []

    @property
    def all(self) -> list[Observer | LogitObserver]:
        """Every observer, in the order a pass saves them."""
        return [*self.observers, *self.logit_observers]

    def tables(self, settings: EquilearningSettings) -> dict[str, pl.DataFrame]:
        """``pr``, ``evaluation``, ``fuzziness`` and ``token_views`` tables."""
        return {
            "pr": self.statistics.table(settings.cutoff),
            "evaluation": self.evaluation.table(),
            "fuzziness": self.fuzziness.table(settings.cutoff),
            "token_views": self.views.table(settings.token_views.groups),
        }

    def named_tables(self) -> dict[str, pl.DataFrame]:
        """The named observers' tables by name (``observers/<name>.csv``)."""
        return {name: observer.table() for name, observer in self.named.items()}

    def token_states(self) -> dict[str, np.ndarray]:
        """The token views' kept states (``TokenViews.arrays``)."""
        return self.views.arrays()
