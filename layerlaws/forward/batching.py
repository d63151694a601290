"""The working-memory model of the model pass, in one place (torch-free): the pass sizes
its automatic batches with it and the jobs' cost model (``layerlaws.forward.costs``) sizes
jobs with it."""

CPU_BATCH_SIZE = 16
"""Sequences per batch of ``batch_size: auto`` on a CPU (and assumed when planning)."""
WORKING_VECTORS = 24
"""Hidden-size vectors of working space per token in a forward pass (MLP, attention,
norms), beside the one per layer that the observers see."""
FREE_MEMORY_SHARE = 0.5
"""Share of a GPU's free memory that an automatic batch may fill."""
MAX_BATCH_SIZE = 512
"""The largest automatic batch, in sequences."""


def activation_vectors(num_layers: int) -> int:
    """Hidden-size vectors of working memory per token: one per layer's state (0..L) and
    ``WORKING_VECTORS`` of scratch."""
    return num_layers + 1 + WORKING_VECTORS


def gpu_batch_size(
    free_bytes: int, *, longest: int, num_layers: int, hidden_size: int, dtype_bytes: int
) -> int:
    """Sequences of ``longest`` tokens per batch that fill ``FREE_MEMORY_SHARE`` of
    ``free_bytes`` (bytes), at least 1 and at most ``MAX_BATCH_SIZE``."""
    per_sequence = longest * activation_vectors(num_layers) * hidden_size * dtype_bytes
    usable = int(free_bytes * FREE_MEMORY_SHARE)
    return max(1, min(MAX_BATCH_SIZE, usable // per_sequence))
