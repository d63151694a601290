"""The workflow's layer (torch-free): config checks, expansion, the results layout, the
targets and inputs of the rules, execution settings and job planning.
"""
