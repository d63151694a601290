"""The equi-learning stage's settings (the config's ``equilearning`` block: He & Su's law of
equi-learning, Fig. S8 for separation fuzziness, Fig. 2 and S1–S6 for the token views,
Fig. 7 for masked-LM probing), read once from the pass's rule params."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from layerlaws.core.settings import (
    StageSettings,
    integer,
    nested,
    number,
    one_of,
    parsed,
    sequence_of,
    text,
)
from layerlaws.forward.settings import MaskingSettings

NORMS = ("model", "standardize", "none")
CONTROLS = ("none", "shuffled_vocab")
SPECIAL_TOKENS = ("exclude", "include")
SHUFFLES = ("present", "vocabulary")
FUZZINESS_CLASSES = ("all", "frequent")


@dataclass(frozen=True)
class FuzzinessSettings:
    """Separation fuzziness with the next token as the class (He & Su Fig. S8)."""

    classes: str = field(default="all", metadata=parsed(one_of(*FUZZINESS_CLASSES)))
    """all: every target id of the run is a class (He & Su's released code); frequent:
    only those of ``min_rows`` rows or more, at most ``max_classes``."""
    min_rows: int = field(default=20, metadata=parsed(integer))
    """Under ``frequent``: a class is counted when this many text tokens precede it (≥ 2)."""
    max_classes: int = field(default=1000, metadata=parsed(integer))
    """Under ``frequent``: at most this many classes, the most frequent (≥ 2)."""


@dataclass(frozen=True)
class TokenViewSettings:
    """PCA of the contextual embeddings of chosen token groups at chosen layers (He & Su
    Fig. 2, S1–S6)."""

    groups: tuple[tuple[str, ...], ...] = field(
        default=(("they", "them"), ("have", "had"), ("are", "is")),
        metadata=parsed(sequence_of(sequence_of(text))),
    )
    """Groups of words, each a single token of the tokenizer; () = no token views."""
    layers: tuple[int, ...] = field(default=(), metadata=parsed(sequence_of(integer)))
    """Layers 0..L; () = round(L/4), round(L/2), round(3L/4), L."""
    max_rows: int = field(default=500, metadata=parsed(integer))
    """Occurrences kept per word (the first in the sample; ≥ 2)."""
    norm: str = field(default="model", metadata=parsed(one_of(*NORMS)))
    """Normalisation of the states before the PCA: model, standardize or none."""


@dataclass(frozen=True)
class EquilearningSettings(StageSettings):
    """What the equi-learning pass computes (He & Su's law: PR of every layer for each target
    offset, norm and control). The defaults are the config's (``schemas/config.schema.yaml``,
    kept equal by ``tests/equilearning/test_equilearning_settings.py``), for the Python API."""

    offsets: tuple[int, ...] = field(default=(-1, 0, 1, 2), metadata=parsed(sequence_of(integer)))
    """Target offsets k (−8..8): the token at t + k is regressed on h[t]."""
    norms: tuple[str, ...] = field(default=NORMS, metadata=parsed(sequence_of(one_of(*NORMS))))
    """Normalisations of the states of layers < L: model, standardize, none."""
    controls: tuple[str, ...] = field(
        default=CONTROLS, metadata=parsed(sequence_of(one_of(*CONTROLS)))
    )
    """Targets: none (the token ids) or shuffled_vocab (ids under a fixed permutation)."""
    shuffle: str = field(default="present", metadata=parsed(one_of(*SHUFFLES)))
    """What ``shuffled_vocab`` permutes: present (the target ids that occur at each offset,
    among themselves, as He & Su's released code) or vocabulary (every token id)."""
    shuffle_seed: int = field(default=0, metadata=parsed(integer))
    """Seed of the permutation of ``shuffled_vocab``."""
    cutoff: float = field(default=1e-12, metadata=parsed(number))
    """Relative eigenvalue cut-off of the feature covariance's pseudo-inverse, in
    (0, 1e-3]."""
    fuzziness: FuzzinessSettings = field(
        default_factory=FuzzinessSettings, metadata=parsed(nested(FuzzinessSettings))
    )
    """Separation fuzziness (He & Su Fig. S8)."""
    token_views: TokenViewSettings = field(
        default_factory=TokenViewSettings, metadata=parsed(nested(TokenViewSettings))
    )
    """Token views (He & Su Fig. 2, S1–S6)."""
    special_tokens: str = field(default="exclude", metadata=parsed(one_of(*SPECIAL_TOKENS)))
    """exclude: special tokens are neither inputs nor targets; include: every position
    is (He & Su's 1 ≤ t ≤ T−1)."""
    masking: MaskingSettings = field(
        default_factory=MaskingSettings, metadata=parsed(nested(MaskingSettings))
    )
    """Masked-LM probing (used when the model's probe is masked_lm)."""

    where = "equilearning"


def run_token_views(config: Mapping[str, Any], dataset: str) -> dict[str, Any]:
    """The ``token_views`` block of a validated config for a run on ``dataset``: its groups
    the dataset's own where it names them (``datasets.<key>.token_view_groups``: He & Su
    choose them by corpus, Figs. S1–S3 on BookCorpus, Figs. 2 and S4–S6 on domain sets)."""
    views = dict(config["equilearning"]["token_views"])
    groups = config["datasets"][dataset].get("token_view_groups")
    return views if groups is None else {**views, "groups": groups}
