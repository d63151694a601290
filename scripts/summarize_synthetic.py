"""Snakemake entry point: the synthetic addition stage's summary table and its comparison
with Yao & Xu's statements (results/synthetic/summary.csv, paper_comparison.csv)."""

from layerlaws.core.atomic import write_csv
from layerlaws.core.logs import run_logged
from layerlaws.synthetic.comparison import paper_comparison
from layerlaws.synthetic.summary import read_results, summarize


def main() -> None:
    pairs, tasks, paths = snakemake.params.pairs, snakemake.params.tasks, snakemake.input
    results = read_results(
        dict(zip(pairs, paths.records, strict=True)),
        dict(zip(pairs, paths.weights, strict=True)),
        dict(zip(tasks, paths.signatures, strict=True)),
    )
    write_csv(snakemake.output.summary, summarize(*results))
    write_csv(snakemake.output.paper_comparison, paper_comparison(*results[:2]))


run_logged(main, snakemake.log[0], snakemake.resources)
