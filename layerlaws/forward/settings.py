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


def regressed_stack(probe: str, encoder_decoder: str) -> str:
    """The stack of an encoder–decoder whose layers a pass under ``probe`` regresses
    (``LayerChoice.stack``): under ``equilearning.encoder_decoder: one_stack`` (He & Su's
    released code) the encoder's under ``next_token`` (the encoder run alone) and the
    decoder's under ``span_corruption`` (the whole model run, its decoder read), which an
    encoder–decoder's ``auto`` is; under ``encoder_then_decoder`` both."""
    if encoder_decoder != "one_stack":
        return "both"
    return "encoder" if probe == "next_token" else "decoder"
