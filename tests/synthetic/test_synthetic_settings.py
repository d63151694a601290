"""The synthetic settings define the addition tasks and the snapshot epoch (the settings'
reading and checking is tested for every stage in tests/core/test_settings.py)."""

from config_blocks import validated_block

from layerlaws.synthetic.settings import SyntheticDataSettings, SyntheticTrainingSettings


def test_the_settings_define_the_task():
    task = SyntheticDataSettings.from_config(validated_block("synthetic")).task("add")
    assert task.kind == "add" and task.anchors == tuple(range(11, 21))
    assert task.keys == tuple(range(101, 141))


def test_the_snapshot_is_the_last_epoch_when_training_stops_before_it():
    assert SyntheticTrainingSettings().snapshot == 120
    assert SyntheticTrainingSettings(epochs=10).snapshot == 10
