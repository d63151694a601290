"""Training a small causal LM from scratch: the plan (torch-free), the training loop, its
segments as workflow jobs (torch-free), the loss curve.
"""
