"""Execution settings: how a job runs, never what it computes (the config's ``execution``).

They are the only settings a job reads outside its params, so changing one never reruns a
job: rules and scripts alike read them through ``Execution.from_config``. Any setting
that changes a number belongs elsewhere (a stage's block, or the model's ``dtype``). The
schema ``layerlaws/config.schema.yaml`` fills in the defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from layerlaws.models.devices import DeviceRequest


@dataclass(frozen=True)
class Execution:
    """The ``execution`` block of a validated config."""

    device: str
    """``auto`` (a free GPU if one is visible, else the CPU), ``cpu`` or ``cuda``."""
    batch_size: int | str
    """Sequences per extraction batch, or ``auto`` (from the GPU's free memory)."""
    lock_dir: str
    """Folder of the GPU claim locks, local to the machine."""
    hidden_state_shard_rows: int
    """Rows per file of kept hidden states (``hidden_states.keep``)."""
    vjp_chunk: int
    """Vector–Jacobian products per batched backward pass (device memory)."""
    shard_texts: int
    """Texts per tokenised corpus shard (memory of the tokenisation job)."""
    duckdb_memory_mb: int
    """Memory of the counting jobs, MiB (their ``mem_mb`` and DuckDB's memory_limit)."""
    gpu_memory_gb: float
    """Memory of one GPU of the machines the jobs run on (planning of GPU counts)."""
    checkpoint_minutes: float
    """Minutes between the progress saves of a model pass or coupling job at most (0:
    after every batch or prompt); a killed job resumes from its last save."""
    partition_runtime_limits: Mapping[str, int]
    """Runtime limit of each SLURM partition, minutes (``snakemake estimate`` checks the
    planned runtimes against them; {}: unchecked)."""

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Execution:
        """The execution settings of a config validated against the schema."""
        return cls(**config["execution"])

    def device_request(self, gpus: int) -> DeviceRequest:
        """What a model job claims: ``gpus`` (at least 1: a CPU job's slot) devices under
        ``device``, through the locks in ``lock_dir``."""
        return DeviceRequest(self.device, self.lock_dir, max(1, gpus))
