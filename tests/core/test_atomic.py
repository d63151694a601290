"""Atomic outputs: an interrupted write leaves nothing that looks finished."""

import errno
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


def test_a_failed_write_removes_the_folders_made_for_it(tmp_path):
    (tmp_path / "kept").mkdir()
    with pytest.raises(RuntimeError), atomic_path(tmp_path / "kept" / "a" / "b" / "x.pt") as t:
        t.write_text("half")
        raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == [tmp_path / "kept"]
    assert list((tmp_path / "kept").iterdir()) == []


@pytest.mark.parametrize(
    "failure",
    [
        lambda temporary: OSError(errno.ENOSPC, "No space left on device", str(temporary)),
        lambda temporary: RuntimeError("IO error: No space left on device (os error 28)"),
    ],
    ids=["named-temporary", "unnamed"],
)
def test_a_full_disk_is_raised_naming_the_output_not_its_temporary(tmp_path, failure):
    target = tmp_path / "out.parquet"
    with pytest.raises(OSError) as raised, atomic_path(target) as temporary:
        temporary.write_text("half")
        raise failure(temporary)
    assert (raised.value.errno, raised.value.filename) == (errno.ENOSPC, str(target))
    assert list(tmp_path.iterdir()) == []


def test_other_failures_are_raised_as_they_were(tmp_path):
    with pytest.raises(FileNotFoundError) as raised, atomic_path(tmp_path / "x") as temporary:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(temporary))
    assert raised.value.filename == str(temporary)
