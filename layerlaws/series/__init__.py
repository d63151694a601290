"""Series of models (checkpoints, sizes): the per-series summary, its fits and figures."""
