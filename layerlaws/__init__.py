"""layerlaws: layer-wise laws of large language models, measured by a Snakemake pipeline.

The package is the importable library behind the workflow; it never imports Snakemake.
"""

__version__ = "0.1.0"
