"""One job of a training (``rules/training.smk``: train_checkpoint): a segment
(``plan.segment_ends``) trained in this process, or in N data-parallel processes on one
node that ``torchrun`` starts, and the record of the step it reached
(``segments.segment_record``), written by rank 0.

The N processes are started as ``python -m torch.distributed.run --standalone
--nproc-per-node N -m layerlaws.training.segment_job <job>``: torchrun's rendezvous on this
machine, one process per claimed GPU (NCCL) or, on a machine without one, N CPU processes
(gloo). Across nodes a job would need ``srun`` to start torchrun on every node of its SLURM
allocation; the Snakemake job is one task on one node, so a training stays on one node
(``parallel.check_node``).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

import numpy as np
import torch

from layerlaws.core.atomic import write_json
from layerlaws.core.errors import LayerlawsError
from layerlaws.core.logs import run_logged
from layerlaws.models.loading import load_tokenizer
from layerlaws.training.plan import TrainingSpec
from layerlaws.training.ranks import Ranks
from layerlaws.training.segments import segment_record
from layerlaws.training.train import model_config, train

log = logging.getLogger(__name__)

PROCESS_GROUP_TIMEOUT = timedelta(hours=2)
"""How long a rank waits for the others at a collective step: the other ranks wait while
rank 0 alone hashes the corpus for the run's fingerprint (a whole Pile subset is hundreds
of GB on disk), evaluates and saves; torch's default (10 to 30 minutes) could end the
training while rank 0 is still reading."""


@dataclass(frozen=True)
class SegmentJob:
    """What a segment's job trains and where its files are (paths as strings)."""

    settings: dict[str, Any]
    """The validated ``training.<key>`` block."""
    end: int
    """The segment end it trains up to."""
    tokenizer: str
    sequences: str
    """The packed corpus (n, context), read memory-mapped."""
    held_out: str
    folder: str
    """The training's checkpoint folder."""
    record: str
    """Where the record of the step reached goes (JSON)."""
    threads: int
    """CPU threads of each process."""
    devices: str
    """The devices, as the record names them (``cpu``, ``cuda:0``, ``2 × cpu``…)."""
    on_gpu: bool = False
    """Whether the processes run on GPUs (NCCL between them) or on the CPU (gloo)."""


def run_segment(job: SegmentJob, device: str) -> None:
    """Train ``job``'s segment on ``device`` in this process (one rank of several under
    torchrun: ``train.train``); rank 0 writes its record."""
    spec = TrainingSpec.of(job.settings)
    tokenizer = load_tokenizer(job.tokenizer)
    sequences = np.load(job.sequences, mmap_mode="r")  # a whole source: on disk
    held_out = np.load(job.held_out)
    torch.set_num_threads(job.threads)
    run = train(
        spec,
        model_config(spec, tokenizer),
        tokenizer,
        sequences,
        held_out=held_out if len(held_out) else None,
        folder=job.folder,
        device=device,
        until=job.end,
    )
    if Ranks.of_group().first:
        record = segment_record(
            spec,
            run.curve,
            job.end,
            resumed_from=run.resumed_from,
            seconds=run.seconds,
            device=job.devices,
            n_sequences=len(sequences),
        )
        write_json(job.record, record)


def launch(job: SegmentJob, processes: int, gpu_ids: tuple[str, ...]) -> None:
    """Run ``job`` in ``processes`` data-parallel processes started by torchrun on this
    machine, one on each of the claimed ``gpu_ids`` (none: on the CPU, gloo); each line of
    their output (their logs, a failing one's traceback) is logged here, in the job's log.
    A LayerlawsError when one of them fails."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={processes}",
        "-m",
        __name__,
        json.dumps(asdict(job)),
    ]
    environment = dict(os.environ)
    if gpu_ids:
        environment["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_ids)
    log.info("starting %d training processes: %s", processes, " ".join(command[:7]))
    with subprocess.Popen(
        command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as started:
        for line in started.stdout:
            log.info("| %s", line.rstrip())
    if started.returncode:
        raise LayerlawsError(
            f"the {processes} processes of the training segment up to step {job.end} failed "
            f"(torchrun's exit status {started.returncode}); each process's error is above "
            f"in this job's log"
        )


def _rank_main(job: SegmentJob) -> None:
    """One rank under torchrun: its process group (NCCL on its GPU, gloo on the CPU), then
    the segment."""
    local = int(os.environ["LOCAL_RANK"])
    device = f"cuda:{local}" if job.on_gpu else "cpu"
    if job.on_gpu:
        torch.cuda.set_device(local)
    torch.distributed.init_process_group(
        "nccl" if job.on_gpu else "gloo", timeout=PROCESS_GROUP_TIMEOUT
    )
    try:
        run_segment(job, device)
    finally:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    segment = SegmentJob(**json.loads(sys.argv[1]))
    run_logged(lambda: _rank_main(segment), None)
