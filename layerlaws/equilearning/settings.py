"""The equi-learning stage's settings (the config's ``equilearning`` block: He & Su's law of
equi-learning, Fig. S8 for separation fuzziness, Fig. 2 and S1–S6 for the token views,
Fig. 7 for masked-LM probing), read once from the pass's rule params."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layerlaws.core.settings import StageSettings, settings_of
from layerlaws.forward.settings import MaskingSettings


@settings_of("equilearning.fuzziness")
class FuzzinessSettings(StageSettings):
    """Separation fuzziness with the next token as the class (He & Su Fig. S8)."""

    classes: str
    min_rows: int
    max_classes: int


@settings_of("equilearning.token_views")
class TokenViewSettings(StageSettings):
    """PCA of the contextual embeddings of chosen token groups at chosen layers (He & Su
    Fig. 2, S1–S6)."""

    groups: tuple[tuple[str, ...], ...]
    layers: tuple[int, ...]
    max_rows: int
    norm: str


@settings_of("equilearning")
class EquilearningSettings(StageSettings):
    """What the equi-learning pass computes (He & Su's law: PR of every layer for each target
    offset, norm and control). Each field is the config key of its name, described, bounded
    and defaulted in the config schema."""

    offsets: tuple[int, ...]
    norms: tuple[str, ...]
    controls: tuple[str, ...]
    shuffle: str
    shuffle_seed: int
    cutoff: float
    fuzziness: FuzzinessSettings
    token_views: TokenViewSettings
    special_tokens: str
    masking: MaskingSettings
    encoder_decoder: str
    layer_states: str


def run_settings(config: Mapping[str, Any], dataset: str) -> dict[str, Any]:
    """The ``settings`` param of a pass on ``dataset`` (``EquilearningSettings.params``):
    the ``equilearning`` block of a validated config, its token-view groups the dataset's
    own where it names them (``datasets.<key>.token_view_groups``: He & Su choose them by
    corpus, Figs. S1–S3 on BookCorpus, Figs. 2 and S4–S6 on domain sets)."""
    block = config["equilearning"]
    groups = config["datasets"][dataset].get("token_view_groups")
    views = block["token_views"] if groups is None else {**block["token_views"], "groups": groups}
    return EquilearningSettings.params(block, token_views=views)
