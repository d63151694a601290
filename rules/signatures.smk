# Probability signatures counted over whole corpora in DuckDB, compared with
# the geometry of each model's embedding matrices.
from layerlaws.signatures.settings import SignatureSettings
from layerlaws.signatures.workflow import OWN_CORPUS_FIGURES, SIGNATURE_FIGURES


rule tokenize_corpus:
    input:
        model=LAYOUT.model(),
        exclude=on.by_wildcards(TARGETS.excluded_sentences),
    output:
        directory(f"{LAYOUT.signatures()}/shards"),
    log:
        LAYOUT.log("tokenize_corpus", "{model}", "{dataset}"),
    wildcard_constraints:
        dataset=WILDCARDS["dataset"],
    params:
        source=on.config_entry(config, "datasets", "dataset", "source"),
        token_budget=config["signatures"]["token_budget"],
        exclude=on.config_entry(config, "datasets", "dataset", "exclude"),
    script:
        "../scripts/tokenize_corpus.py"


rule count_tokens:
    input:
        shards=f"{LAYOUT.signatures()}/shards",
    output:
        unigrams=f"{LAYOUT.signatures()}/unigrams.parquet",
        bigrams=f"{LAYOUT.signatures()}/bigrams.parquet",
    log:
        LAYOUT.log("count_tokens", "{model}", "{dataset}"),
    wildcard_constraints:
        dataset=WILDCARDS["dataset"],
    threads: 2
    resources:
        mem_mb=EXECUTION.duckdb_memory_mb,
    script:
        "../scripts/count_tokens.py"


# A training's checkpoints on their own training dataset are compared with the counts of
# the packed sequences the training read (signatures.own_corpus_counts: trained).
rule training_token_shards:
    input:
        sequences=f"{LAYOUT.training()}/sequences.npy",
        tokenizer=on.by_wildcards(TARGETS.training_tokenizer),
    output:
        directory(f"{LAYOUT.training_counts()}/shards"),
    log:
        LAYOUT.log("training_token_shards", "{training}"),
    script:
        "../scripts/training_token_shards.py"


rule count_training_tokens:
    input:
        shards=f"{LAYOUT.training_counts()}/shards",
    output:
        unigrams=f"{LAYOUT.training_counts()}/unigrams.parquet",
        bigrams=f"{LAYOUT.training_counts()}/bigrams.parquet",
    log:
        LAYOUT.log("count_training_tokens", "{training}"),
    threads: 2
    resources:
        mem_mb=EXECUTION.duckdb_memory_mb,
    script:
        "../scripts/count_tokens.py"


rule pool_counts:
    input:
        unigrams=lambda wildcards: TARGETS.pool_members(
            wildcards.model, wildcards.dataset, "unigrams"
        ),
        bigrams=lambda wildcards: TARGETS.pool_members(
            wildcards.model, wildcards.dataset, "bigrams"
        ),
    output:
        unigrams=f"{LAYOUT.signatures()}/unigrams.parquet",
        bigrams=f"{LAYOUT.signatures()}/bigrams.parquet",
    log:
        LAYOUT.log("pool_counts", "{model}", "{dataset}"),
    wildcard_constraints:
        dataset=WILDCARDS["pool"],
    threads: 2
    resources:
        mem_mb=EXECUTION.duckdb_memory_mb,
    script:
        "../scripts/pool_counts.py"


rule compare_signatures:
    input:
        unigrams=lambda wildcards: TARGETS.counts(
            wildcards.model, wildcards.dataset, "unigrams"
        ),
        bigrams=lambda wildcards: TARGETS.counts(
            wildcards.model, wildcards.dataset, "bigrams"
        ),
        model=LAYOUT.model(),
    output:
        rcos=report(
            f"{LAYOUT.signatures()}/rcos.csv",
            caption="../report/rcos.rst",
            category="Probability signatures",
            subcategory="{model} on {dataset}",
        ),
        per_token=f"{LAYOUT.signatures()}/per_token.parquet",
        percentiles=f"{LAYOUT.signatures()}/percentiles.csv",
        percentile_bins=f"{LAYOUT.signatures()}/percentile_bins.csv",
        views=f"{LAYOUT.signatures()}/views.npz",
        summary=f"{LAYOUT.signatures()}/summary.json",
    log:
        LAYOUT.log("compare_signatures", "{model}", "{dataset}"),
    params:
        settings=SignatureSettings.params(config["signatures"]),
    script:
        "../scripts/compare_signatures.py"


rule plot_signatures:
    input:
        views=f"{LAYOUT.signatures()}/views.npz",
        per_token=f"{LAYOUT.signatures()}/per_token.parquet",
        percentiles=f"{LAYOUT.signatures()}/percentiles.csv",
    output:
        **{
            name: report(
                f"{LAYOUT.signatures()}/{name}.{PLOT_FORMAT}",
                caption=f"../report/signatures_{name}.rst",
                category="Probability signatures",
                subcategory="{model} on {dataset}",
            )
            for name in SIGNATURE_FIGURES
        },
    log:
        LAYOUT.log("plot_signatures", "{model}", "{dataset}"),
    params:
        plots=plot_options(config, "signatures"),
        title="{model} on {dataset}",
    script:
        "../scripts/plot_signatures.py"


# A chosen group of tokens (signatures.token_groups) in one signature run: cos(W_E) and
# cos(φ_next) over the group and each token's most frequent next tokens (Yao & Xu Fig. 12).
rule compare_token_group:
    input:
        bigrams=lambda wildcards: TARGETS.counts(
            wildcards.model, wildcards.dataset, "bigrams"
        ),
        model=LAYOUT.model(),
        # The tokenizer whose ids the counts are in (a checkpoint's: its training's).
        tokenizer=lambda wildcards: LAYOUT.model(
            EXPANDED.tokenizer_owner(wildcards.model)
        ),
    output:
        cosines=f"{LAYOUT.token_group()}/cosines.csv",
        next_tokens=f"{LAYOUT.token_group()}/next_tokens.csv",
    log:
        LAYOUT.log("compare_token_group", "{model}", "{dataset}", "{group}"),
    wildcard_constraints:
        group=WILDCARDS["key"],
    params:
        tokens=lambda wildcards: config["signatures"]["token_groups"][wildcards.group][
            "tokens"
        ],
        where="signatures.token_groups.{group}.tokens",
    script:
        "../scripts/compare_token_group.py"


rule plot_token_group:
    input:
        cosines=f"{LAYOUT.token_group()}/cosines.csv",
    output:
        heatmaps=report(
            f"{LAYOUT.token_group()}/heatmaps.{PLOT_FORMAT}",
            caption="../report/signatures_token_group.rst",
            category="Probability signatures",
            subcategory="{model} on {dataset}",
        ),
    log:
        LAYOUT.log("plot_token_group", "{model}", "{dataset}", "{group}"),
    wildcard_constraints:
        group=WILDCARDS["key"],
    params:
        plots=plot_options(config, "signatures"),
        title="{model} on {dataset}: token group {group}",
    script:
        "../scripts/plot_token_group.py"


rule compare_corpora:
    input:
        rcos=lambda wildcards: TARGETS.corpus_files(wildcards.model, "rcos.csv"),
        per_token=lambda wildcards: TARGETS.corpus_files(
            wildcards.model, "per_token.parquet"
        ),
    output:
        rcos=report(
            f"{LAYOUT.corpus_comparison()}/rcos_by_corpus.csv",
            caption="../report/signatures_rcos_by_corpus_table.rst",
            category="Probability signatures",
            subcategory="{model} across corpora",
        ),
        rcos_figure=report(
            f"{LAYOUT.corpus_comparison()}/rcos_by_corpus.{PLOT_FORMAT}",
            caption="../report/signatures_rcos_by_corpus.rst",
            category="Probability signatures",
            subcategory="{model} across corpora",
        ),
        per_token_figure=report(
            f"{LAYOUT.corpus_comparison()}/per_token_by_corpus.{PLOT_FORMAT}",
            caption="../report/signatures_per_token_by_corpus.rst",
            category="Probability signatures",
            subcategory="{model} across corpora",
        ),
    log:
        LAYOUT.log("compare_corpora", "{model}"),
    params:
        corpora=on.by_wildcards(EXPANDED.signature_corpora),
        plots=plot_options(config, "signatures"),
        title="{model}",
    script:
        "../scripts/compare_corpora.py"


rule compare_own_corpora:
    input:
        rcos=lambda wildcards: TARGETS.own_corpus_files(
            wildcards.own_corpus, "rcos.csv"
        ),
        per_token=lambda wildcards: TARGETS.own_corpus_files(
            wildcards.own_corpus, "per_token.parquet"
        ),
        percentiles=lambda wildcards: TARGETS.own_corpus_files(
            wildcards.own_corpus, "percentiles.csv"
        ),
        percentile_bins=lambda wildcards: TARGETS.own_corpus_files(
            wildcards.own_corpus, "percentile_bins.csv"
        ),
    output:
        **{
            f"{name}_figure": report(
                f"{LAYOUT.own_corpus()}/{name}.{PLOT_FORMAT}",
                caption=f"../report/signatures_{name}.rst",
                category="Probability signatures",
                subcategory="{own_corpus}: each model on its own corpus",
            )
            for name in OWN_CORPUS_FIGURES
        },
        rcos=report(
            f"{LAYOUT.own_corpus()}/rcos_by_dataset.csv",
            caption="../report/signatures_rcos_by_dataset_table.rst",
            category="Probability signatures",
            subcategory="{own_corpus}: each model on its own corpus",
        ),
        deciles=f"{LAYOUT.own_corpus()}/pooled_deciles.csv",
        bins=f"{LAYOUT.own_corpus()}/pooled_percentile_bins.csv",
    log:
        LAYOUT.log("compare_own_corpora", "{own_corpus}"),
    wildcard_constraints:
        own_corpus=WILDCARDS["key"],
    params:
        runs=lambda wildcards: [
            list(run) for run in EXPANDED.own_corpus[wildcards.own_corpus]
        ],
        plots=plot_options(config, "signatures"),
        title="{own_corpus}",
    script:
        "../scripts/compare_own_corpora.py"
