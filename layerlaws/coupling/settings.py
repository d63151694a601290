"""The coupling stage's settings (the config's ``coupling`` block: Aubry et al.'s coupling
of Jacobians, §3.1 for its token-wise kinds, Fig. 23–25 for the trajectories), read once
from the measuring rule's params. The defaults are the schema's, for building settings
by hand (``layerlaws.api``)."""

from __future__ import annotations

from layerlaws.core.settings import StageSettings, settings_of


@settings_of("coupling")
class CouplingSettings(StageSettings):
    """How block coupling and trajectories are measured (Aubry et al.); each field is the
    config key of its name, described, bounded and defaulted in the config schema. The
    block's ``runs``, ``prompts`` and ``shards`` are the plan's, not a measurement's."""

    ks: tuple[int, ...]
    token_layers: tuple[int | tuple[int, int], ...]
    fixed_input_token: int
    fixed_output_token: int
    final_norm: str
    metrics: tuple[str, ...]
    svd: str
    products: str
    svd_seed: int
    init_seed: int
    lss_window: int
    keep_arrays: int | str
    """Which prompts' raw arrays the job writes (``layerlaws.coupling.kept``)."""

    @property
    def includes_final_norm(self) -> bool:
        """Whether the last block includes the model's final norm."""
        return self.final_norm == "in_last_block"
