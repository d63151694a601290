# Stage 4: the model pass that streams the equi-learning statistics (GPU when present),
# the law fit, figures and the cross-run summary.


rule equilearning_pass:
    input:
        tokens="results/tokens/{model}/{dataset}.parquet",
        model="results/models/{model}",
    output:
        pr="results/equilearning/{model}/{dataset}/pr.csv",
        report="results/equilearning/{model}/{dataset}/pass.json",
        evaluation="results/evaluation/{model}/{dataset}.csv",
        fuzziness="results/equilearning/{model}/{dataset}/fuzziness.csv",
        token_views="results/equilearning/{model}/{dataset}/token_views.csv",
        token_states="results/equilearning/{model}/{dataset}/token_views.npz",
    log:
        "results/logs/equilearning_pass/{model}/{dataset}.log",
    threads: 4
    resources:
        **needs(PLANNER.equilearning_pass),
    params:
        offsets=config["equilearning"]["offsets"],
        norms=config["equilearning"]["norms"],
        controls=config["equilearning"]["controls"],
        shuffle_seed=config["equilearning"]["shuffle_seed"],
        cutoff=config["equilearning"]["cutoff"],
        fuzziness=config["equilearning"]["fuzziness"],
        token_views=config["equilearning"]["token_views"],
        special_tokens=config["equilearning"]["special_tokens"],
        probe=model_probe,
        masking=config["equilearning"]["masking"],
        dtype=model_dtype,
    script:
        "../scripts/equilearning_pass.py"


rule fit_law:
    input:
        pr="results/equilearning/{model}/{dataset}/pr.csv",
        fuzziness="results/equilearning/{model}/{dataset}/fuzziness.csv",
        token_views="results/equilearning/{model}/{dataset}/token_views.csv",
    output:
        law="results/equilearning/{model}/{dataset}/law.csv",
        fuzziness="results/equilearning/{model}/{dataset}/fuzziness_law.csv",
    log:
        "results/logs/fit_law/{model}/{dataset}.log",
    script:
        "../scripts/fit_law.py"


rule plot_equilearning:
    input:
        pr="results/equilearning/{model}/{dataset}/pr.csv",
        law="results/equilearning/{model}/{dataset}/law.csv",
        fuzziness="results/equilearning/{model}/{dataset}/fuzziness.csv",
        fuzziness_law="results/equilearning/{model}/{dataset}/fuzziness_law.csv",
        token_views="results/equilearning/{model}/{dataset}/token_views.csv",
    output:
        law=report(
            f"results/equilearning/{{model}}/{{dataset}}/law.{PLOT_FORMAT}",
            caption="../report/law.rst",
            category="Equi-learning",
            subcategory="{model} on {dataset}",
        ),
        norms=report(
            f"results/equilearning/{{model}}/{{dataset}}/norms.{PLOT_FORMAT}",
            caption="../report/norms.rst",
            category="Equi-learning",
            subcategory="{model} on {dataset}",
        ),
        fuzziness=report(
            f"results/equilearning/{{model}}/{{dataset}}/fuzziness.{PLOT_FORMAT}",
            caption="../report/fuzziness.rst",
            category="Equi-learning",
            subcategory="{model} on {dataset}",
        ),
        token_views=report(
            f"results/equilearning/{{model}}/{{dataset}}/token_views.{PLOT_FORMAT}",
            caption="../report/token_views.rst",
            category="Equi-learning",
            subcategory="{model} on {dataset}",
        ),
    log:
        "results/logs/plot_equilearning/{model}/{dataset}.log",
    params:
        plots=plot_options(),
        title="{model} on {dataset}",
    script:
        "../scripts/plot_equilearning.py"


rule summarize_equilearning:
    input:
        law=[f"{equilearning_folder(m, d)}/law.csv" for m, d in runs()],
    output:
        summary=report(
            "results/equilearning/summary.csv",
            caption="../report/summary_table.rst",
            category="Summary",
        ),
        best=report(
            "results/equilearning/best_datasets.csv",
            caption="../report/best_datasets.rst",
            category="Summary",
        ),
    log:
        "results/logs/summarize_equilearning.log",
    params:
        runs=runs(),
    script:
        "../scripts/summarize_equilearning.py"


rule plot_summary:
    input:
        pr=[f"{equilearning_folder(m, d)}/pr.csv" for m, d in runs()],
        summary="results/equilearning/summary.csv",
    output:
        report(
            f"results/equilearning/summary.{PLOT_FORMAT}",
            caption="../report/summary_figure.rst",
            category="Summary",
        ),
    log:
        "results/logs/plot_summary.log",
    params:
        runs=runs(),
        plots=plot_options(),
    script:
        "../scripts/plot_summary.py"
