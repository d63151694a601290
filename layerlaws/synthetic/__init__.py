"""Yao & Xu's composite addition tasks: the stage's settings, data and signatures, the
embedding models, summary, figures.
"""
