"""The signature comparison's settings (the config's ``signatures`` block; Yao & Xu §4 and §6),
read once from the comparing rule's params."""

from __future__ import annotations

from dataclasses import dataclass, field

from layerlaws.core.settings import StageSettings, integer, one_of, parsed


@dataclass(frozen=True)
class SignatureSettings(StageSettings):
    """How the signatures of a corpus are compared with a model's embeddings; the config
    block's ``runs``, ``pools`` and ``token_budget`` are the plan's and the counting's."""

    where = "signatures"

    top_tokens: int = field(metadata=parsed(integer))
    """C (≥ 3): the most frequent tokens compared (Yao & Xu's 10,000)."""
    per_token_diagonal: str = field(
        default="include", metadata=parsed(one_of("include", "exclude"))
    )
    """Per-token view: a token's whole similarity rows, itself included (Yao & Xu's), or
    without the diagonal."""
