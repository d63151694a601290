"""Representation geometry of every layer, streamed from the model pass: effective rank
(Garrido et al.'s RankMe), the eigenspectrum's power-law decay (Agrawal et al.'s α-ReQ),
Skean et al.'s dataset and prompt entropy and curvature, anisotropy, and linear CKA
between layers (Kornblith et al.). The settings, the observer and the cost model
(torch-free, for the planner).
"""
