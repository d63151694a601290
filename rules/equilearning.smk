# The model pass that streams the equi-learning statistics (GPU when present),
# the law fit, figures and the cross-run summary.
from layerlaws.equilearning.settings import run_settings
from layerlaws.equilearning.workflow import (
    EQUILEARNING_FIGURES,
    GEOMETRY,
    observer_params,
    observer_sources,
)

PASS_PARAMS = {
    "settings": lambda wildcards: run_settings(config, wildcards.dataset),
    "observers": lambda wildcards: observer_params(config, wildcards.model),
    "probe": on.model_setting(EXPANDED, "probe", "auto"),
    "dtype": on.model_setting(EXPANDED, "dtype"),
    "quantization": on.model_quantization(EXPANDED, "passes"),
}


rule equilearning_pass:
    input:
        tokens=LAYOUT.tokens(),
        model=LAYOUT.model(),
        shards=lambda wildcards: EXPANDED.equilearning_sharding.files(
            lambda shard: LAYOUT.equilearning_shard(
                wildcards.model, wildcards.dataset, shard
            )
        ),
        observer_sources=lambda wildcards: observer_sources(config, wildcards.model),
    output:
        pr=f"{LAYOUT.equilearning()}/pr.csv",
        report=f"{LAYOUT.equilearning()}/pass.json",
        evaluation=LAYOUT.evaluation(),
        fuzziness=f"{LAYOUT.equilearning()}/fuzziness.csv",
        token_views=f"{LAYOUT.equilearning()}/token_views.csv",
        token_states=f"{LAYOUT.equilearning()}/token_views.npz",
        observers=directory(LAYOUT.equilearning_observers()),
    log:
        LAYOUT.log("equilearning_pass", "{model}", "{dataset}"),
    threads: MODEL_THREADS
    resources:
        **needs("equilearning_pass"),
    params:
        **PASS_PARAMS,
    script:
        "../scripts/equilearning_pass.py"


# With equilearning.shards above 1: each shard of a run's texts a job of its own (its
# own device claim and progress saves), merged by equilearning_pass.
rule equilearning_pass_shard:
    input:
        tokens=LAYOUT.tokens(),
        model=LAYOUT.model(),
        observer_sources=lambda wildcards: observer_sources(config, wildcards.model),
    output:
        LAYOUT.equilearning_shard(),
    log:
        LAYOUT.log("equilearning_pass_shard", "{model}", "{dataset}", "{shard}"),
    threads: MODEL_THREADS
    resources:
        **needs("equilearning_pass_shard"),
    params:
        **PASS_PARAMS,
        shards=EXPANDED.equilearning_sharding.shards,
    script:
        "../scripts/equilearning_pass.py"


rule fit_law:
    input:
        pr=f"{LAYOUT.equilearning()}/pr.csv",
        fuzziness=f"{LAYOUT.equilearning()}/fuzziness.csv",
    output:
        law=f"{LAYOUT.equilearning()}/law.csv",
        fuzziness=f"{LAYOUT.equilearning()}/fuzziness_law.csv",
    log:
        LAYOUT.log("fit_law", "{model}", "{dataset}"),
    script:
        "../scripts/fit_law.py"


rule plot_equilearning:
    input:
        pr=f"{LAYOUT.equilearning()}/pr.csv",
        law=f"{LAYOUT.equilearning()}/law.csv",
        fuzziness=f"{LAYOUT.equilearning()}/fuzziness.csv",
        fuzziness_law=f"{LAYOUT.equilearning()}/fuzziness_law.csv",
        token_views=f"{LAYOUT.equilearning()}/token_views.csv",
    output:
        **{
            name: report(
                f"{LAYOUT.equilearning()}/{name}.{PLOT_FORMAT}",
                caption=f"../report/{name}.rst",
                category="Equi-learning",
                subcategory="{model} on {dataset}",
            )
            for name in EQUILEARNING_FIGURES
        },
    log:
        LAYOUT.log("plot_equilearning", "{model}", "{dataset}"),
    params:
        plots=plot_options(config),
        title="{model} on {dataset}",
    script:
        "../scripts/plot_equilearning.py"


# Runs whose equilearning.observers include geometry: each quantity against depth.
rule plot_geometry:
    input:
        observers=LAYOUT.equilearning_observers(),
    output:
        report(
            f"{LAYOUT.equilearning()}/{GEOMETRY}.{PLOT_FORMAT}",
            caption="../report/geometry.rst",
            category="Equi-learning",
            subcategory="{model} on {dataset}",
        ),
    log:
        LAYOUT.log("plot_geometry", "{model}", "{dataset}"),
    params:
        plots=plot_options(config),
        title="{model} on {dataset}",
    script:
        "../scripts/plot_geometry.py"


rule summarize_equilearning:
    input:
        law=TARGETS.run_files("law.csv"),
    output:
        summary=report(
            f"{LAYOUT.equilearning_summary()}/summary.csv",
            caption="../report/summary_table.rst",
            category="Summary",
        ),
        best=report(
            f"{LAYOUT.equilearning_summary()}/best_datasets.csv",
            caption="../report/best_datasets.rst",
            category="Summary",
        ),
    log:
        LAYOUT.log("summarize_equilearning"),
    params:
        runs=list(EXPANDED.runs),
    script:
        "../scripts/summarize_equilearning.py"


rule plot_summary:
    input:
        pr=TARGETS.run_files("pr.csv"),
        summary=f"{LAYOUT.equilearning_summary()}/summary.csv",
    output:
        report(
            f"{LAYOUT.equilearning_summary()}/summary.{PLOT_FORMAT}",
            caption="../report/summary_figure.rst",
            category="Summary",
        ),
    log:
        LAYOUT.log("plot_summary"),
    params:
        runs=list(EXPANDED.runs),
        plots=plot_options(config),
    script:
        "../scripts/plot_summary.py"
