"""Torch-free foundations shared by every stage: errors, logs, atomic writes, typed settings,
dtypes, geometry (cosines, R_cos, principal planes), figures, files inside packages."""
