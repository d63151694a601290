"""The model pass's settings that change its inputs: masked-LM probing (He & Su, Fig. 7).
Torch-free, so that the equi-learning and hidden-state stages can build them from their
rule params before any model is loaded."""

from __future__ import annotations

from layerlaws.core.settings import StageSettings, settings_of


@settings_of("equilearning.masking")
class MaskingSettings(StageSettings):
    """Masked-LM probing (He & Su Fig. 7): each text token is chosen with probability
    ``rate`` and replaced by the mask token (``mask_only``, He & Su's released code) or,
    under ``bert``, by the mask token (80 %), a random token (10 %) or itself."""

    rate: float
    seed: int
    scheme: str
