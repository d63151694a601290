# Jacobian coupling of transformer blocks and hidden trajectories, for the
# trained model and its randomly initialised twin.
from layerlaws.coupling.settings import CouplingSettings
from layerlaws.coupling.workflow import (
    COUPLING_FIGURES,
    MEASURED,
    PER_PROMPT_FIGURES,
    PER_PROMPT_TABLES,
    TRAJECTORY_FIGURES,
)

COUPLING_PARAMS = {
    "prompts": lambda wildcards: EXPANDED.prompt_sets[wildcards.prompts],
    "settings": CouplingSettings.params(config["coupling"]),
    "dtype": on.model_setting(EXPANDED, "dtype"),
    "quantization": on.model_quantization(EXPANDED, "coupling"),
}


# Every prompt's tables; the raw arrays (factors, couplings, streams) and token-wise
# rows (tokens.csv) of the prompts coupling.keep_arrays keeps (by default the figures'
# prompts).
rule measure_coupling:
    input:
        model=LAYOUT.model(),
        sentences=on.by_wildcards(TARGETS.prompt_sentences),
        initial=on.by_wildcards(TARGETS.initial_model),
        shards=lambda wildcards: EXPANDED.coupling_sharding.files(
            lambda shard: LAYOUT.coupling_shard(
                wildcards.model, wildcards.prompts, shard
            )
        ),
    output:
        **{name: f"{LAYOUT.coupling()}/{path}" for name, path in MEASURED.items()},
    log:
        LAYOUT.log("measure_coupling", "{model}", "{prompts}"),
    threads: MODEL_THREADS
    resources:
        **needs("measure_coupling"),
    params:
        **COUPLING_PARAMS,
    script:
        "../scripts/measure_coupling.py"


# With coupling.shards above 1: each shard of a prompt set a job of its own
# (its own device claim and progress saves), merged by measure_coupling.
rule measure_coupling_shard:
    input:
        model=LAYOUT.model(),
        sentences=on.by_wildcards(TARGETS.prompt_sentences),
        initial=on.by_wildcards(TARGETS.initial_model),
    output:
        LAYOUT.coupling_shard(),
    log:
        LAYOUT.log("measure_coupling_shard", "{model}", "{prompts}", "{shard}"),
    threads: MODEL_THREADS
    resources:
        **needs("measure_coupling_shard"),
    params:
        **COUPLING_PARAMS,
        shards=EXPANDED.coupling_sharding.shards,
    script:
        "../scripts/measure_coupling.py"


rule plot_coupling:
    input:
        depth=f"{LAYOUT.coupling()}/depth.csv",
        singular_values=f"{LAYOUT.coupling()}/singular_values.csv",
        tokens=f"{LAYOUT.coupling()}/tokens.csv",
        couplings=f"{LAYOUT.coupling()}/couplings.npz",
        trajectories=f"{LAYOUT.trajectories()}/tokens.csv",
        layers=f"{LAYOUT.trajectories()}/layers.csv",
        streams=f"{LAYOUT.trajectories()}/streams.npz",
    output:
        **{
            name: report(
                f"{LAYOUT.coupling()}/{name}.{PLOT_FORMAT}",
                caption=f"../report/coupling_{name}.rst",
                category="Block coupling",
                subcategory="{model} on {prompts}",
            )
            for name in COUPLING_FIGURES
        },
        **{
            name: report(
                f"{LAYOUT.trajectories()}/{name}.{PLOT_FORMAT}",
                caption=f"../report/trajectories_{name}.rst",
                category="Trajectories",
                subcategory="{model} on {prompts}",
            )
            for name in TRAJECTORY_FIGURES
        },
    log:
        LAYOUT.log("plot_coupling", "{model}", "{prompts}"),
    params:
        plots=plot_options(config),
        title="{model} on {prompts}",
    script:
        "../scripts/plot_coupling.py"


# The coupling of each prompt and of each dataset of a prompt set (Aubry et al. §5.4,
# Table 3), and coupling against prompt length (Fig. 10): asked for by rule all for prompt
# sets drawn from several datasets.
rule summarize_coupling:
    input:
        depth=f"{LAYOUT.coupling()}/depth.csv",
        prompts=f"{LAYOUT.coupling()}/prompts.csv",
    output:
        **{
            name: report(
                f"{LAYOUT.coupling()}/{name}.csv",
                caption=f"../report/coupling_{name}.rst",
                category="Block coupling",
                subcategory="{model} on {prompts}",
            )
            for name in PER_PROMPT_TABLES
        },
        **{
            name: report(
                f"{LAYOUT.coupling()}/{name}.{PLOT_FORMAT}",
                caption=f"../report/coupling_{name}.rst",
                category="Block coupling",
                subcategory="{model} on {prompts}",
            )
            for name in PER_PROMPT_FIGURES
        },
    log:
        LAYOUT.log("summarize_coupling", "{model}", "{prompts}"),
    params:
        plots=plot_options(config),
        title="{model} on {prompts}",
    script:
        "../scripts/summarize_coupling.py"
