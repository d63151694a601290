"""The model pass's settings that change its inputs: masked-LM probing (He & Su, Fig. 7).
Torch-free, so that the equi-learning and hidden-state stages can build them from their
rule params before any model is loaded."""

from __future__ import annotations

from dataclasses import dataclass, field

from layerlaws.core.settings import StageSettings, integer, number, one_of, parsed

SCHEMES = ("mask_only", "bert")


@dataclass(frozen=True)
class MaskingSettings(StageSettings):
    """Masked-LM probing (He & Su Fig. 7): each text token is chosen with probability
    ``rate`` and replaced by the mask token (``mask_only``, He & Su's released code) or,
    under ``bert``, by the mask token (80 %), a random token (10 %) or itself."""

    rate: float = field(default=0.15, metadata=parsed(number))
    """Probability that a text token is chosen, in (0, 1] (BERT's 0.15)."""
    seed: int = field(default=0, metadata=parsed(integer))
    """Seed of the draws."""
    scheme: str = field(default="mask_only", metadata=parsed(one_of(*SCHEMES)))
    """mask_only: every chosen token becomes the mask token; bert: BERT's 80/10/10."""

    where = "equilearning.masking"
