"""What the geometry observer measures, where a paper leaves a choice (torch-free): the
config's ``equilearning.geometry`` block, its defaults the schema's."""

from __future__ import annotations

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.settings import StageSettings, allowed, settings_of

DATASET_ROWS = allowed("equilearning.geometry.dataset_rows")
PROMPT_STATES = allowed("equilearning.geometry.prompt_states")
CURVATURE_ANGLES = allowed("equilearning.geometry.curvature_angle")
ANISOTROPY_PAIRS = allowed("equilearning.geometry.anisotropy_pairs")
PRODUCT_DTYPES = allowed("equilearning.geometry.product_dtype")


@settings_of("equilearning.geometry")
class GeometrySettings(StageSettings):
    """The choices of ``layerlaws.geometry.observer.GeometryObserver``; the defaults are the
    papers' (each field says whose). Built by keyword (the config block's keys)."""

    entropy_alpha: float
    """Order α of the matrix-based Rényi entropy of Skean et al. (2025, §3) for the prompt
    and dataset entropy; 1 (the default, theirs) is its limit −Σ p log p."""
    dataset_rows: str
    """The rows of the dataset entropy's matrix: ``texts``, each text's mean token state
    (Skean et al.'s dataset entropy, on mean-pooled prompts, normalised as
    ``prompt_states`` says), or ``tokens``, every raw token state (the spectrum of the
    layer's uncentred second moment; costs no extra memory)."""
    prompt_states: str
    """The states Skean et al.'s prompt entropy, dataset entropy and curvature are made of:
    ``normalized`` (the default, their released code: each text's token states centred on
    its mean token state and each token scaled to unit length, and the Gram matrices'
    negative entries set to 0) or ``raw`` (the states as they are, no clipping); see
    ``layerlaws.geometry.prompts``."""
    curvature_angle: str
    """``absolute`` (the default, Skean et al.'s released code): arccos |cos| of consecutive
    steps, in [0, π/2], a zero step counting as angle 0 and a text with no angle as 0;
    ``signed`` (Hosseini & Fedorenko 2023): arccos cos, in [0, π], undefined angles and texts
    without one left out."""
    anisotropy_pairs: str
    """The pairs of token states whose mean cosine is the anisotropy: ``other_texts`` (the
    default; Ethayarajh 2019 draws words from different contexts) or ``all`` (every pair
    of distinct tokens, those of one text included)."""
    alpha_req_ranks: tuple[int, int]
    """First and last rank (1 = the largest eigenvalue) of the covariance eigenvalues that
    α-ReQ's power law is fitted to, weighted by 1/rank (Agrawal et al. 2022, as their
    released code fits it, after Stringer et al. 2019); cut to the covariance's rank."""
    rankme_epsilon: float
    """The ε added to each normalised singular value in RankMe (Garrido et al. 2023, §3)."""
    product_dtype: str
    """The dtype of each batch's matrix products (moments of the states shifted by a fixed
    shift per layer, the texts' normalised states and Gram matrices), ``float32`` or
    ``float64``, added into float64 sums; the second moment of layer 0 and of each layer
    until it has seen d rows is made in float64 whatever this says (see
    ``layerlaws.geometry.observer``)."""
    cka_against_last: bool
    """Also linear CKA between each layer and the last: keeps every layer's batch states
    until the last layer's arrive (see ``layerlaws.geometry.costs``)."""

    def layer_pairs(self, num_layers: int) -> list[tuple[int, int]]:
        """The (l, m), l < m, of layers 0..``num_layers`` whose linear CKA is measured:
        every consecutive pair and, with ``cka_against_last``, every layer against the
        last (the pair (L−1, L) is both, and counted once): L or 2L − 1 pairs."""
        consecutive = {(layer - 1, layer) for layer in range(1, num_layers + 1)}
        last = {(layer, num_layers) for layer in range(num_layers)}
        return sorted(consecutive | (last if self.cka_against_last else set()))

    def __post_init__(self) -> None:
        # As the config gives them (a list) or as written (a tuple): one frozen tuple.
        object.__setattr__(self, "alpha_req_ranks", tuple(self.alpha_req_ranks))
        object.__setattr__(self, "entropy_alpha", float(self.entropy_alpha))
        if not self.entropy_alpha > 0:
            raise LayerlawsError(
                f"geometry entropy_alpha is {self.entropy_alpha}; the Rényi entropy's order "
                f"must be positive (Skean et al. use 1)"
            )
        if self.dataset_rows not in DATASET_ROWS:
            raise LayerlawsError(
                f"geometry dataset_rows is {self.dataset_rows!r}; choose one of {DATASET_ROWS}"
            )
        for key, value, choices in (
            ("prompt_states", self.prompt_states, PROMPT_STATES),
            ("curvature_angle", self.curvature_angle, CURVATURE_ANGLES),
            ("anisotropy_pairs", self.anisotropy_pairs, ANISOTROPY_PAIRS),
        ):
            if value not in choices:
                raise LayerlawsError(f"geometry {key} is {value!r}; choose one of {choices}")
        if self.product_dtype not in PRODUCT_DTYPES:
            raise LayerlawsError(
                f"geometry product_dtype is {self.product_dtype!r}; choose one of {PRODUCT_DTYPES}"
            )
        first, last = (*self.alpha_req_ranks, 0, 0)[:2]
        if len(self.alpha_req_ranks) != 2 or not 1 <= first < last:
            raise LayerlawsError(
                f"geometry alpha_req_ranks is {self.alpha_req_ranks}; give two ranks "
                f"1 <= first < last (the paper's code fits ranks 6 to 100)"
            )
        if not self.rankme_epsilon >= 0:
            raise LayerlawsError(
                f"geometry rankme_epsilon is {self.rankme_epsilon}; it must be >= 0 (RankMe "
                f"uses 1e-7)"
            )
