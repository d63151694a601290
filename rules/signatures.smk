# Stage 5: probability signatures counted over whole corpora in DuckDB, compared with
# the geometry of each model's embedding matrices.


rule tokenize_corpus:
    input:
        model="results/models/{model}",
        exclude=excluded_sentences,
    output:
        directory("results/signatures/{model}/{dataset}/shards"),
    log:
        "results/logs/tokenize_corpus/{model}/{dataset}.log",
    wildcard_constraints:
        dataset=DATASET_KEYS,
    params:
        source=lambda wildcards: dataset_config(wildcards)["source"],
        token_budget=config["signatures"]["token_budget"],
        exclude=lambda wildcards: dataset_config(wildcards)["exclude"],
    script:
        "../scripts/tokenize_corpus.py"


rule count_tokens:
    input:
        shards="results/signatures/{model}/{dataset}/shards",
    output:
        unigrams="results/signatures/{model}/{dataset}/unigrams.parquet",
        bigrams="results/signatures/{model}/{dataset}/bigrams.parquet",
    log:
        "results/logs/count_tokens/{model}/{dataset}.log",
    wildcard_constraints:
        dataset=DATASET_KEYS,
    threads: 2
    resources:
        mem_mb=EXECUTION.duckdb_memory_mb,
    script:
        "../scripts/count_tokens.py"


rule pool_counts:
    input:
        unigrams=pool_members("unigrams"),
        bigrams=pool_members("bigrams"),
    output:
        unigrams="results/signatures/{model}/{dataset}/unigrams.parquet",
        bigrams="results/signatures/{model}/{dataset}/bigrams.parquet",
    log:
        "results/logs/pool_counts/{model}/{dataset}.log",
    wildcard_constraints:
        dataset=POOL_KEYS,
    threads: 2
    resources:
        mem_mb=EXECUTION.duckdb_memory_mb,
    script:
        "../scripts/pool_counts.py"


rule compare_signatures:
    input:
        unigrams=lambda wildcards: f"{counts_folder(wildcards.model, wildcards.dataset)}/unigrams.parquet",
        bigrams=lambda wildcards: f"{counts_folder(wildcards.model, wildcards.dataset)}/bigrams.parquet",
        model="results/models/{model}",
    output:
        rcos=report(
            "results/signatures/{model}/{dataset}/rcos.csv",
            caption="../report/rcos.rst",
            category="Probability signatures",
            subcategory="{model} on {dataset}",
        ),
        per_token="results/signatures/{model}/{dataset}/per_token.parquet",
        percentiles="results/signatures/{model}/{dataset}/percentiles.csv",
        views="results/signatures/{model}/{dataset}/views.npz",
        summary="results/signatures/{model}/{dataset}/summary.json",
    log:
        "results/logs/compare_signatures/{model}/{dataset}.log",
    params:
        top_tokens=config["signatures"]["top_tokens"],
        per_token_diagonal=config["signatures"]["per_token_diagonal"],
    script:
        "../scripts/compare_signatures.py"


rule plot_signatures:
    input:
        views="results/signatures/{model}/{dataset}/views.npz",
        per_token="results/signatures/{model}/{dataset}/per_token.parquet",
        percentiles="results/signatures/{model}/{dataset}/percentiles.csv",
    output:
        **{
            name: report(
                f"results/signatures/{{model}}/{{dataset}}/{name}.{PLOT_FORMAT}",
                caption=f"../report/signatures_{name}.rst",
                category="Probability signatures",
                subcategory="{model} on {dataset}",
            )
            for name in SIGNATURE_FIGURES
        },
    log:
        "results/logs/plot_signatures/{model}/{dataset}.log",
    params:
        plots=plot_options("signatures"),
        title="{model} on {dataset}",
    script:
        "../scripts/plot_signatures.py"


rule compare_corpora:
    input:
        rcos=lambda wildcards: [
            f"{signature_folder(wildcards.model, corpus)}/rcos.csv"
            for corpus in signature_corpora(wildcards.model)
        ],
        per_token=lambda wildcards: [
            f"{signature_folder(wildcards.model, corpus)}/per_token.parquet"
            for corpus in signature_corpora(wildcards.model)
        ],
    output:
        rcos=report(
            "results/signatures/{model}/rcos_by_corpus.csv",
            caption="../report/signatures_rcos_by_corpus_table.rst",
            category="Probability signatures",
            subcategory="{model} across corpora",
        ),
        rcos_figure=report(
            f"results/signatures/{{model}}/rcos_by_corpus.{PLOT_FORMAT}",
            caption="../report/signatures_rcos_by_corpus.rst",
            category="Probability signatures",
            subcategory="{model} across corpora",
        ),
        per_token_figure=report(
            f"results/signatures/{{model}}/per_token_by_corpus.{PLOT_FORMAT}",
            caption="../report/signatures_per_token_by_corpus.rst",
            category="Probability signatures",
            subcategory="{model} across corpora",
        ),
    log:
        "results/logs/compare_corpora/{model}.log",
    params:
        corpora=lambda wildcards: signature_corpora(wildcards.model),
        plots=plot_options("signatures"),
        title="{model}",
    script:
        "../scripts/compare_corpora.py"
