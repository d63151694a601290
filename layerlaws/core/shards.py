"""Which items a shard of a job takes (``coupling.shards``, ``equilearning.shards``)."""


def shard_indices(count: int, shard: int, shards: int) -> range:
    """The indices of shard ``shard`` (0-based) of ``shards`` among ``count`` items (prompts,
    or sequences in order of first appearance): every ``shards``-th from ``shard`` on, so
    that the shards' sizes differ by one at most and each holds items from the whole
    list (long and short, early and late)."""
    return range(shard, count, shards)
