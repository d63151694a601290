"""The model pass: batching, masking for masked-LM probing, and kept hidden states (writer and
reader).
"""
