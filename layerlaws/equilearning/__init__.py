"""He & Su's law of equi-learning: the stage's settings, streamed statistics, regression,
norms, fuzziness, token views, evaluation, the law fit and its figures.
"""
