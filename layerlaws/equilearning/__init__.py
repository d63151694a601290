"""He & Su's law of equi-learning: streamed statistics, regression, norms, fuzziness, token
views, evaluation, the law fit and its figures.
"""
