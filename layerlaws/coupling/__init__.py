"""Aubry et al.'s block coupling and trajectories: the stage's settings and layer pairs,
Jacobians, the coupling metric, the measurement of a prompt set, line-shape and
expodistance, figures.
"""
