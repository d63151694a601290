"""Peak resident memory of the running process, for benchmarks that measure each method in
a process of its own."""

from __future__ import annotations

import resource
import sys
from pathlib import Path


def peak_rss_mib() -> float:
    """This process's peak resident set size in MiB.

    On Linux this is ``VmHWM`` from ``/proc/self/status``, which starts afresh at ``exec``;
    ``getrusage``'s ``ru_maxrss`` does not (it keeps the parent's resident size at the
    fork), so a child spawned by a large benchmark process would report the parent's
    memory. Elsewhere ``ru_maxrss`` is the best there is (kilobytes on Linux, bytes on
    macOS).
    """
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    scale = 2**20 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / scale
