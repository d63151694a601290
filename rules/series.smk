# One summary per series (checkpoints, sizes, families) and its figures: each
# quantity against x, the members side by side, generalisation against coupling, and the
# scores' other fits.
from layerlaws.series.settings import SeriesSettings
from layerlaws.series.workflow import SERIES_FIGURES


rule summarize_series:
    input:
        unpack(on.by_wildcards(TARGETS.series_inputs)),
    output:
        summary=report(
            f"{LAYOUT.series()}/summary.csv",
            caption="../report/series_summary.rst",
            category="Series",
            subcategory="{series}",
        ),
        fits=report(
            f"{LAYOUT.series()}/fits.csv",
            caption="../report/series_fits_table.rst",
            category="Series",
            subcategory="{series}",
        ),
    log:
        LAYOUT.log("summarize_series", "{series}"),
    params:
        members=on.by_wildcards(TARGETS.series_summary_members),
        settings=lambda wildcards: SeriesSettings.params(
            config["series"][wildcards.series]
        ),
        norm=series_norm(config),
    script:
        "../scripts/summarize_series.py"


rule plot_series:
    input:
        summary=f"{LAYOUT.series()}/summary.csv",
        fits=f"{LAYOUT.series()}/fits.csv",
    output:
        **{
            name: report(
                f"{LAYOUT.series()}/{name}.{PLOT_FORMAT}",
                caption=f"../report/series_{name}.rst",
                category="Series",
                subcategory="{series}",
            )
            for name in SERIES_FIGURES
        },
    log:
        LAYOUT.log("plot_series", "{series}"),
    params:
        plots=plot_options(config),
        x=on.config_entry(config, "series", "series", "x"),
        title="{series}",
    script:
        "../scripts/plot_series.py"
