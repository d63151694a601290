"""The equi-learning pass's settings param: a dataset's own token-view groups (the
settings' reading and checking is tested for every stage in tests/core/test_settings.py)."""

from config_blocks import validated_block

from layerlaws.equilearning.settings import EquilearningSettings, run_settings


def test_a_dataset_may_name_its_own_token_view_groups():
    """He & Su pick the token views' words by corpus (Figs. S1–S3, 2, S4–S6)."""
    block = validated_block("equilearning")
    config = {
        "equilearning": block,
        "datasets": {"books": {"token_view_groups": None}, "law": {"token_view_groups": [["law"]]}},
    }
    assert run_settings(config, "books") == EquilearningSettings.params(block)
    own = run_settings(config, "law")
    assert own == {
        **EquilearningSettings.params(block),
        "token_views": {**block["token_views"], "groups": [["law"]]},
    }
    assert block["token_views"]["groups"] != [["law"]]
    assert EquilearningSettings.from_config(own).token_views.groups == (("law",),)
