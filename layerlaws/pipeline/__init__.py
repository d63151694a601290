"""The workflow's layer (torch-free): the list of stages (each stage's figures, outputs and
config checks are its ``workflow`` module), expansion, the results layout, the targets and
inputs of the rules, execution settings and job planning.
"""
