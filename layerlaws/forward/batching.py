"""Batching constants of the model pass (torch-free, so that job planning can read them)."""

CPU_BATCH_SIZE = 16
"""Sequences per batch of ``batch_size: auto`` on a CPU (and assumed when planning)."""
