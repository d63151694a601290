# Stage 7: one summary per series (checkpoints, sizes, families) and its figures: each
# quantity against x, and generalisation against coupling.


rule summarize_series:
    input:
        series_inputs,
    output:
        summary=report(
            "results/series/{series}/summary.csv",
            caption="../report/series_summary.rst",
            category="Series",
            subcategory="{series}",
        ),
        fits=report(
            "results/series/{series}/fits.csv",
            caption="../report/series_fits.rst",
            category="Series",
            subcategory="{series}",
        ),
    log:
        "results/logs/summarize_series/{series}.log",
    params:
        members=series_member_files,
        x=lambda wildcards: config["series"][wildcards.series]["x"],
        norm=SERIES_NORM,
    script:
        "../scripts/summarize_series.py"


rule plot_series:
    input:
        summary="results/series/{series}/summary.csv",
        fits="results/series/{series}/fits.csv",
    output:
        quantities=report(
            f"results/series/{{series}}/quantities.{PLOT_FORMAT}",
            caption="../report/series_quantities.rst",
            category="Series",
            subcategory="{series}",
        ),
        generalisation=report(
            f"results/series/{{series}}/generalisation.{PLOT_FORMAT}",
            caption="../report/series_generalisation.rst",
            category="Series",
            subcategory="{series}",
        ),
    log:
        "results/logs/plot_series/{series}.log",
    params:
        plots=plot_options(),
        x=lambda wildcards: config["series"][wildcards.series]["x"],
        title="{series}",
    script:
        "../scripts/plot_series.py"
