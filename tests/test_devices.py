"""Device claiming: fake GPUs, concurrent processes, CUDA_VISIBLE_DEVICES, no GPU."""

import json
import multiprocessing
import time

import pytest

from layerlaws.devices import claim_device, visible_gpu_ids
from layerlaws.errors import LayerlawsError

FAKE_GPUS = ["0", "1", "2"]


def _hold_a_device(lock_dir: str, record: str, seconds: float) -> None:
    with claim_device("auto", lock_dir, gpu_ids=FAKE_GPUS, poll_seconds=0.05) as claim:
        started = time.monotonic()
        time.sleep(seconds)
        finished = time.monotonic()
    with open(record, "a") as handle:
        handle.write(json.dumps([claim.gpu_id, claim.device, started, finished]) + "\n")


def test_concurrent_jobs_never_share_a_device(tmp_path):
    record = tmp_path / "claims.jsonl"
    context = multiprocessing.get_context("spawn")
    jobs = [
        context.Process(target=_hold_a_device, args=(str(tmp_path / "locks"), str(record), 0.4))
        for _ in range(8)
    ]
    for job in jobs:
        job.start()
    for job in jobs:
        job.join(timeout=60)
        assert job.exitcode == 0
    claims = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(claims) == 8
    assert {gpu_id for gpu_id, *_ in claims} <= set(FAKE_GPUS)
    for gpu_id, device, *_ in claims:
        assert device == f"cuda:{FAKE_GPUS.index(gpu_id)}"
    for i, (gpu_a, _, start_a, end_a) in enumerate(claims):
        for gpu_b, _, start_b, end_b in claims[i + 1 :]:
            if gpu_a == gpu_b:
                assert end_a <= start_b or end_b <= start_a, "two jobs held one GPU at once"
    # 8 jobs on 3 devices take at least 3 rounds, so some of them waited.
    span = max(c[3] for c in claims) - min(c[2] for c in claims)
    assert span >= 3 * 0.4 * 0.95


def test_claim_is_released_after_the_block(tmp_path):
    with claim_device("auto", tmp_path, gpu_ids=["7"]) as first:
        assert first.gpu_id == "7"
    with claim_device("auto", tmp_path, gpu_ids=["7"]) as second:
        assert second.describe() == "cuda:0 (GPU id 7)"


def test_cuda_visible_devices_is_honoured():
    assert visible_gpu_ids({"CUDA_VISIBLE_DEVICES": "3,5"}, device_count=2) == ["3", "5"]
    assert visible_gpu_ids({"CUDA_VISIBLE_DEVICES": ""}, device_count=0) == []
    assert visible_gpu_ids({}, device_count=2) == ["0", "1"]


def test_cpu_fallback_and_missing_gpu(tmp_path):
    with claim_device("auto", tmp_path, gpu_ids=[]) as claim:
        assert claim.device == "cpu"
    with claim_device("cpu", tmp_path, gpu_ids=FAKE_GPUS) as claim:
        assert claim.device == "cpu"
    with (
        pytest.raises(LayerlawsError, match="no CUDA device is visible"),
        claim_device("cuda", tmp_path, gpu_ids=[]),
    ):
        pass
    with pytest.raises(LayerlawsError, match="allowed values"), claim_device("gpu", tmp_path):
        pass
