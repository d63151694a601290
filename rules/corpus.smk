# A seeded sample of probing texts per dataset (independent of the model).


rule sample_sentences:
    input:
        exclude=on.by_wildcards(TARGETS.excluded_sentences),
    output:
        LAYOUT.sentences(),
    log:
        LAYOUT.log("sample_sentences", "{dataset}"),
    # Before other ready jobs: a training's corpus starts its chain, the longest.
    priority: 50
    # Reads a hub dataset (streamed, for the large corpora, which cannot be downloaded
    # whole) and writes a small sample: a local rule, so that under a cluster executor it
    # runs on the submitting host, where the network is; light on the CPU.
    localrule: True
    params:
        source=on.config_entry(config, "datasets", "dataset", "source"),
        n_samples=on.config_entry(config, "datasets", "dataset", "n_samples"),
        sample_seed=on.config_entry(config, "datasets", "dataset", "sample_seed"),
        exclude=on.config_entry(config, "datasets", "dataset", "exclude"),
    script:
        "../scripts/sample_sentences.py"
