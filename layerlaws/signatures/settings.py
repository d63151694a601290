"""The signature comparison's settings (the config's ``signatures`` block; Yao & Xu §4 and §6),
read once from the comparing rule's params."""

from __future__ import annotations

from layerlaws.core.settings import StageSettings, settings_of


@settings_of("signatures")
class SignatureSettings(StageSettings):
    """How the signatures of a corpus are compared with a model's embeddings; the config
    block's ``runs``, ``pools`` and ``token_budget`` are the plan's and the counting's."""

    top_tokens: int
    per_token_diagonal: str
