"""Yao & Xu's composite addition tasks: data and signatures, the embedding models, summary,
figures.
"""
