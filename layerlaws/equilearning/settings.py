"""The equi-learning stage's settings (the config's ``equilearning`` block: He & Su's law of
equi-learning, Fig. S8 for separation fuzziness, Fig. 2 and S1–S6 for the token views,
Fig. 7 for masked-LM probing), read once from the pass's rule params."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.settings import StageSettings, settings_of
from layerlaws.forward.observers import ObserverSpec
from layerlaws.forward.settings import MaskingSettings
from layerlaws.geometry.costs import GeometryCosts

BUILT_IN_OBSERVERS = {"geometry": ("layerlaws.geometry.observer:GeometryObserver", GeometryCosts)}
"""The named observers that come with the package, by name: their class and its torch-free
part (settings class and costs). Each reads its settings from the ``equilearning`` block's
key of its name (``equilearning.geometry``)."""


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


def observer_specs(block: Mapping[str, Any], model: str | None = None) -> tuple[ObserverSpec, ...]:
    """The named observers of an ``equilearning`` block (its ``observers``: a built-in's name,
    or a block of name, class, settings and models), those of every run, or with ``model``
    (a measured model's key) those that measure its runs: the entries without ``models``
    and those naming it, the model it is a revision of or the training it is a checkpoint
    of. Raises a LayerlawsError naming the entry on a name given twice, a block without a
    class whose name is no built-in's, a plug-in named as a built-in, or settings given
    to a built-in."""
    specs, names = [], set()
    for index, entry in enumerate(block.get("observers", ())):
        key = f"equilearning.observers[{index}]"
        entry = {"name": entry} if isinstance(entry, str) else entry
        name = entry["name"]
        if name in names:
            raise LayerlawsError(
                f"{key}.name: {name!r} names two observers; each table needs a name of its own"
            )
        names.add(name)
        if "class" in entry:
            if name in BUILT_IN_OBSERVERS:
                raise LayerlawsError(
                    f"{key}.name: {name!r} is a built-in observer's name; give yours another"
                )
            spec = ObserverSpec(name, entry["class"], entry.get("settings", {}), key)
        elif name not in BUILT_IN_OBSERVERS:
            raise LayerlawsError(
                f"{key}: {name!r} is no built-in observer ({', '.join(BUILT_IN_OBSERVERS)}); "
                f"name your observer's class (class: 'package.module:Class')"
            )
        elif "settings" in entry:
            raise LayerlawsError(
                f"{key}.settings: the built-in {name} reads its settings from equilearning.{name}"
            )
        else:
            source, declared = BUILT_IN_OBSERVERS[name]
            settings = block.get(name, {})
            spec = ObserverSpec(name, source, settings, key, declared, f"equilearning.{name}")
        chosen = entry.get("models")
        if model is None or chosen is None or model.split("@")[0] in chosen:
            specs.append(spec)
    return tuple(specs)
