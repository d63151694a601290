"""The working-memory model shared by the model pass and the job planner."""

from layerlaws.forward.batching import MAX_BATCH_SIZE, gpu_batch_size


def test_a_gpu_batch_fills_half_the_free_memory_within_its_bounds():
    # 12 layers, width 768, bf16, 128 tokens: (12 + 1 + 24) vectors of 768 x 2 bytes per token.
    per_sequence = 128 * 37 * 768 * 2
    free = 40 * per_sequence + 7
    assert gpu_batch_size(free, longest=128, num_layers=12, hidden_size=768, dtype_bytes=2) == 20
    assert gpu_batch_size(10, longest=128, num_layers=12, hidden_size=768, dtype_bytes=2) == 1
    huge = 10**6 * per_sequence
    assert (
        gpu_batch_size(huge, longest=128, num_layers=12, hidden_size=768, dtype_bytes=2)
        == MAX_BATCH_SIZE
    )
