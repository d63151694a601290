"""Training a small causal LM from scratch: the plan (torch-free), the training loop, the loss
curve.
"""
