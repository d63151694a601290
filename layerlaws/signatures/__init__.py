"""Yao & Xu's probability signatures: counts in DuckDB, the stage's settings, comparison with
the embeddings, figures."""
