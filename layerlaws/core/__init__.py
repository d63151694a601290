"""Torch-free foundations shared by every stage: errors, logs, atomic writes, figures, geometry."""
