"""Aubry et al.'s block coupling and trajectories: Jacobians, the coupling metric, line-shape
and expodistance, figures.
"""
