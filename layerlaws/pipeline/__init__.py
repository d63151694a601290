"""The workflow's layer (torch-free): config checks, expansion, the results layout, execution
settings and job planning.
"""
