"""Device claiming: fake GPUs, concurrent jobs wanting one or two, CUDA_VISIBLE_DEVICES,
no GPU."""

import fcntl
import json
import multiprocessing
import os
import threading
import time

import pytest

from layerlaws.core.errors import LayerlawsError
from layerlaws.models.devices import claim_devices, visible_gpu_ids

FAKE_GPUS = ["0", "1", "2"]


def _hold_devices(lock_dir: str, record: str, count: int, seconds: float) -> None:
    with claim_devices("auto", lock_dir, count, gpu_ids=FAKE_GPUS, poll_seconds=0.05) as claim:
        started = time.monotonic()
        time.sleep(seconds)
        finished = time.monotonic()
    with open(record, "a") as handle:
        line = [list(claim.gpu_ids), list(claim.devices), count, started, finished]
        handle.write(json.dumps(line) + "\n")


def run_jobs(tmp_path, counts: list[int], seconds: float) -> list[list]:
    record = tmp_path / "claims.jsonl"
    context = multiprocessing.get_context("spawn")
    jobs = [
        context.Process(
            target=_hold_devices, args=(str(tmp_path / "locks"), str(record), count, seconds)
        )
        for count in counts
    ]
    for job in jobs:
        job.start()
    for job in jobs:
        job.join(timeout=60)
        assert job.exitcode == 0
    return [json.loads(line) for line in record.read_text().splitlines()]


def assert_no_device_held_twice(claims: list[list]) -> None:
    for i, (gpus_a, _, _, start_a, end_a) in enumerate(claims):
        for gpus_b, _, _, start_b, end_b in claims[i + 1 :]:
            if set(gpus_a) & set(gpus_b):
                assert end_a <= start_b or end_b <= start_a, "two jobs held one GPU at once"


def test_concurrent_one_and_two_device_jobs_all_finish_and_never_share(tmp_path):
    counts = [1, 2, 1, 2, 1, 1, 2, 1]
    claims = run_jobs(tmp_path, counts, 0.3)
    assert sorted(count for *_, count, _, _ in claims) == sorted(counts)
    for gpus, devices, count, *_ in claims:
        assert len(gpus) == len(devices) == count
        assert len(set(gpus)) == count and set(gpus) <= set(FAKE_GPUS)
        assert devices == [f"cuda:{FAKE_GPUS.index(gpu)}" for gpu in gpus]
    assert_no_device_held_twice(claims)
    # 11 GPU-slots of 0.3 s on 3 GPUs take at least 4 rounds, so jobs waited.
    span = max(c[4] for c in claims) - min(c[3] for c in claims)
    assert span >= 4 * 0.3 * 0.95


def test_a_two_device_claim_holds_nothing_while_it_waits(tmp_path):
    """All or none: with one of two GPUs taken, the other stays free for anyone."""
    locks = tmp_path / "locks"
    claimed = threading.Event()
    with claim_devices("auto", locks, 1, gpu_ids=["a", "b"]) as first:
        assert first.gpu_ids == ("a",)

        def wait_for_both() -> None:
            with claim_devices("auto", locks, 2, gpu_ids=["a", "b"], poll_seconds=0.05):
                claimed.set()

        waiter = threading.Thread(target=wait_for_both)
        waiter.start()
        time.sleep(0.5)
        assert not claimed.is_set()
        descriptor = os.open(locks / "gpu-b.lock", os.O_RDWR)
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)  # b is free: no error
        fcntl.flock(descriptor, fcntl.LOCK_UN)
        os.close(descriptor)
    waiter.join(timeout=10)
    assert claimed.is_set()


def test_claim_is_released_after_the_block(tmp_path):
    with claim_devices("auto", tmp_path, gpu_ids=["7"]) as first:
        assert first.gpu_ids == ("7",)
    with claim_devices("auto", tmp_path, gpu_ids=["7"]) as second:
        assert second.describe() == "cuda:0 (GPU id 7)"


def test_cuda_visible_devices_is_honoured():
    assert visible_gpu_ids({"CUDA_VISIBLE_DEVICES": "3,5"}, device_count=2) == ["3", "5"]
    assert visible_gpu_ids({"CUDA_VISIBLE_DEVICES": ""}, device_count=0) == []
    assert visible_gpu_ids({}, device_count=2) == ["0", "1"]


def test_cpu_fallback_missing_gpus_and_too_many_asked(tmp_path):
    with claim_devices("auto", tmp_path, 2, gpu_ids=[]) as claim:
        assert claim.devices == ("cpu",) and claim.device == "cpu"
    with claim_devices("cpu", tmp_path, gpu_ids=FAKE_GPUS) as claim:
        assert claim.device == "cpu"
    with (
        pytest.raises(LayerlawsError, match="no CUDA device is visible"),
        claim_devices("cuda", tmp_path, gpu_ids=[]),
    ):
        pass
    with (
        pytest.raises(LayerlawsError, match="needs 4 GPUs but only 3 are visible"),
        claim_devices("auto", tmp_path, 4, gpu_ids=FAKE_GPUS),
    ):
        pass
    with pytest.raises(LayerlawsError, match="allowed values"), claim_devices("gpu", tmp_path):
        pass
