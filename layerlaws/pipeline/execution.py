"""Execution settings: how a job runs, never what it computes (the config's ``execution``).

They are the only settings a job reads outside its params, so changing one never reruns a
job: rules and scripts alike read them through ``Execution.from_config``. Any setting
that changes a number belongs elsewhere (a stage's block, or the model's ``dtype``). The
schema ``layerlaws/config.schema.yaml`` fills in the defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layerlaws.core.settings import read_settings, settings_of
from layerlaws.models.devices import DeviceRequest


@settings_of("execution")
class Execution:
    """The ``execution`` block of a validated config; each field is the key of its name,
    described and defaulted in the config schema."""

    device: str
    batch_size: int | str
    lock_dir: str
    hidden_state_shard_rows: int
    vjp_chunk: int
    shard_texts: int
    duckdb_memory_mb: int
    gpu_memory_gb: float
    fuzziness_host_gb: float
    gpus_per_node: int
    checkpoint_minutes: float
    partition_runtime_limits: Mapping[str, int]
    gpu_partition: str | None

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Execution:
        """The execution settings of a config validated against the schema."""
        return read_settings(cls, config["execution"], "execution")

    def device_request(self, gpus: int) -> DeviceRequest:
        """What a model job claims: ``gpus`` (at least 1: a CPU job's slot) devices under
        ``device``, through the locks in ``lock_dir``."""
        return DeviceRequest(self.device, self.lock_dir, max(1, gpus))
