"""Atomic outputs: an interrupted write leaves nothing that looks finished."""

import json

import pytest

from layerlaws.core.atomic import atomic_path, write_json


def test_failed_write_leaves_no_file(tmp_path):
    target = tmp_path / "out.csv"
    with pytest.raises(RuntimeError), atomic_path(target) as temporary:
        temporary.write_text("half")
        raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []


def test_folder_is_replaced_whole(tmp_path):
    target = tmp_path / "hidden"
    target.mkdir()
    (target / "old.npy").write_text("old")
    with atomic_path(target) as temporary:
        temporary.mkdir()
        (temporary / "new.npy").write_text("new")
    assert [p.name for p in target.iterdir()] == ["new.npy"]


def test_json_round_trips_and_leaves_no_temporary(tmp_path):
    data = {"tied_embeddings": True, "n_tokens": 2000, "nested": {"x": [1.5, None]}}
    write_json(tmp_path / "meta.json", data)
    assert json.loads((tmp_path / "meta.json").read_text()) == data
    assert [p.name for p in tmp_path.iterdir()] == ["meta.json"]
