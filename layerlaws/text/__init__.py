"""Probing texts: their sources, the seeded corpus sample, and tokenisation."""
