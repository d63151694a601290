"""Models: the architecture table, preparation and facts, loading and placement, devices,
residual blocks.
"""
