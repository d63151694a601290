"""Atomic outputs: an interrupted write leaves nothing that looks finished."""

import errno
import json

import numpy as np
import pytest

from layerlaws.core.atomic import atomic_path, csv_rows, npz_entries, write_json


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


def test_a_csv_written_rows_at_a_time_is_the_whole_table(tmp_path):
    import polars as pl

    first = [{"layer": 1, "value": 0.5}, {"layer": 2, "value": 0.25}]
    second = [{"layer": 3, "value": float("nan")}]
    with csv_rows(tmp_path / "t.csv") as table:
        table.add([])
        table.add(first)
        table.add(second)
        assert not (tmp_path / "t.csv").exists()  # in place only when the block ends
    read = pl.read_csv(tmp_path / "t.csv")
    assert read.columns == ["layer", "value"] and read["layer"].to_list() == [1, 2, 3]
    np.testing.assert_allclose(read["value"].to_numpy(), [0.5, 0.25, np.nan])


def test_an_npz_written_an_array_at_a_time_reads_as_numpy_saved_it(tmp_path):
    arrays = {"a": np.arange(6.0).reshape(2, 3), "b": np.array([np.nan, 1.0], np.float32)}
    with npz_entries(tmp_path / "x.npz") as archive:
        for key, array in arrays.items():
            archive.add(key, array)
    with np.load(tmp_path / "x.npz") as read:
        assert sorted(read) == ["a", "b"]
        for key, array in arrays.items():
            assert read[key].dtype == array.dtype
            np.testing.assert_array_equal(read[key], array)


def test_an_interrupted_stream_leaves_no_file(tmp_path):
    for stream, name in ((csv_rows, "t.csv"), (npz_entries, "x.npz")):
        with pytest.raises(RuntimeError), stream(tmp_path / name):
            raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []
