"""Loaded by every Python process started with this folder first on PYTHONPATH (the SLURM
requeue test's jobs): each progress save (``<folder>/.resume/<name>.pt``) renamed into
place is followed by a pause, so that the test can requeue the tiny model's pass while it
runs. Only the timing changes, never a number."""

import os
import time

PAUSE_SECONDS = 2.0
_replace = os.replace


def replace(source, destination, *args, **kwargs):
    _replace(source, destination, *args, **kwargs)
    path = os.fspath(destination)
    if "/.resume/" in path and path.endswith(".pt"):
        time.sleep(PAUSE_SECONDS)


os.replace = replace
