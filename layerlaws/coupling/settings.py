"""The coupling stage's settings (the config's ``coupling`` block: Aubry et al.'s coupling
of Jacobians, §3.1 for its token-wise kinds, Fig. 23–25 for the trajectories), read once
from the measuring rule's params. The defaults are the config's, for building settings
by hand (``layerlaws.api``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from layerlaws.core.settings import (
    StageSettings,
    either,
    integer,
    one_of,
    parsed,
    sequence_of,
)
from layerlaws.coupling.costs import AUTO, TOKEN_LOCAL, WHOLE_SEQUENCE
from layerlaws.coupling.miscoupling import METRICS, PAPER, UNNORMALISED


@dataclass(frozen=True)
class CouplingSettings(StageSettings):
    """How block coupling and trajectories are measured (Aubry et al.); the config block's
    ``runs`` and ``prompts`` are the plan's, not a measurement's."""

    where = "coupling"

    ks: tuple[int, ...] = field(default=(10, 30, 50), metadata=parsed(sequence_of(integer)))
    """Numbers K ≥ 1 of top singular vectors the coupling m̃ is measured with."""
    token_layers: tuple[int | tuple[int, int], ...] = field(
        default=(), metadata=parsed(sequence_of(either(integer, sequence_of(integer, length=2))))
    )
    """Token-wise coupling: a layer l (1..L) couples layer l with itself, a pair (l, l′)
    the Jacobians of l with the singular vectors of l′; () = the middle layer."""
    fixed_input_token: int = field(default=0, metadata=parsed(integer))
    """Input token t1 of the fixed_input kind (J_{t1,t}, t ≥ t1); negative counts from
    the end."""
    fixed_output_token: int = field(default=-1, metadata=parsed(integer))
    """Output token t2 of the fixed_output kind (J_{t,t2}, t ≤ t2); −1 = the last token."""
    final_norm: str = field(
        default="in_last_block", metadata=parsed(one_of("in_last_block", "excluded"))
    )
    """in_last_block: the last block includes the final norm, x^L is what the LM head
    reads (Aubry et al. Eq. 7); excluded: x^L and the last Jacobian come before it."""
    metrics: tuple[str, ...] = field(
        default=(PAPER, UNNORMALISED), metadata=parsed(sequence_of(one_of(*METRICS)))
    )
    """Coupling metrics measured (``layerlaws.coupling.miscoupling``): ``paper`` is Aubry et
    al.'s m̃ (Eq. 14), ``unnormalised`` their m (Eq. 13), the ``released_*`` ones their
    released code's."""
    svd: str = field(
        default=AUTO, metadata=parsed(one_of(AUTO, "full", "randomized", "matrix_free"))
    )
    """The top singular vectors by a full or a randomized SVD of each formed Jacobian, or
    (``matrix_free``) by a randomised block Krylov SVD of Jacobian–vector products, the
    coupling matrices from products too, no Jacobian formed
    (``layerlaws.coupling.operators``); ``auto``: full or matrix_free per model and
    prompt set, whichever costs fewer products (``layerlaws.coupling.costs``)."""
    products: str = field(default=TOKEN_LOCAL, metadata=parsed(one_of(TOKEN_LOCAL, WHOLE_SEQUENCE)))
    """How a Jacobian product (one VJP or JVP) is taken: ``token_local`` re-runs the block
    for the output token alone, the other tokens' keys and values from a cache (exact; the
    cost of one token's path, ``layerlaws.coupling.local``), wherever the family allows
    and the re-run reproduces the block; ``whole_sequence`` differentiates the block's
    output over the whole prompt (T tokens a product; the fallback, and the reference)."""
    svd_seed: int = field(default=0, metadata=parsed(integer))
    """Seed of the randomized SVDs' random projection (the same for every Jacobian)."""
    init_seed: int = field(default=0, metadata=parsed(integer))
    """Seed of the randomly initialised twin."""
    lss_window: int = field(default=11, metadata=parsed(integer))
    """Blocks per line-shape window, centred on each block (Aubry et al.'s 11; ≥ 1)."""

    @property
    def includes_final_norm(self) -> bool:
        """Whether the last block includes the model's final norm."""
        return self.final_norm == "in_last_block"
