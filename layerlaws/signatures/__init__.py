"""Yao & Xu's probability signatures: counts in DuckDB, comparison with the embeddings, figures."""
