"""Models: the architecture table, preparation, facts and their file, loading and placement,
GPU claims, residual blocks.
"""
