"""The coupling settings' token-wise layers and final norm (the settings' reading and
checking is tested for every stage in tests/core/test_settings.py)."""

from layerlaws.coupling.measurement import TokenCoupling
from layerlaws.coupling.settings import CouplingSettings


def test_token_layers_and_their_coupling():
    settings = CouplingSettings.from_config({"token_layers": [3, [1, 4]]})
    assert TokenCoupling.of(settings, num_layers=4) == TokenCoupling(((3, 3), (1, 4)), 0, -1)
    assert TokenCoupling.of(CouplingSettings(), num_layers=6).layer_pairs == ((3, 3),)


def test_the_final_norm_belongs_to_the_last_block_by_default():
    """Aubry et al. Eq. 7: x^L is what the LM head reads."""
    assert CouplingSettings().includes_final_norm
    assert not CouplingSettings(final_norm="excluded").includes_final_norm
