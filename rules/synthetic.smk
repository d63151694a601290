# Stage 8: the composite addition tasks of Yao & Xu (paper 003, §5): data, probability
# signatures, linear and one-hidden-layer embedding models trained for several seeds.


rule synthetic_data:
    output:
        data="results/synthetic/{task}/data.npz",
        signatures="results/synthetic/{task}/signatures.npz",
        summary=report(
            "results/synthetic/{task}/signatures.csv",
            caption="../report/synthetic_signatures_table.rst",
            category="Synthetic addition tasks",
        ),
    log:
        "results/logs/synthetic_data/{task}.log",
    params:
        settings=synthetic_data_settings(),
    script:
        "../scripts/synthetic_data.py"


rule train_synthetic:
    input:
        data="results/synthetic/{task}/data.npz",
        signatures="results/synthetic/{task}/signatures.npz",
    output:
        r_order="results/synthetic/{task}/{model}/r_order.csv",
        weights="results/synthetic/{task}/{model}/weights.npz",
    log:
        "results/logs/train_synthetic/{task}/{model}.log",
    threads: 1
    params:
        settings=synthetic_training_settings(),
    script:
        "../scripts/train_synthetic.py"


rule summarize_synthetic:
    input:
        **synthetic_inputs(),
    output:
        summary=report(
            "results/synthetic/summary.csv",
            caption="../report/synthetic_summary.rst",
            category="Synthetic addition tasks",
        ),
    log:
        "results/logs/summarize_synthetic.log",
    params:
        pairs=synthetic_pairs(),
        tasks=config["synthetic"]["tasks"],
    script:
        "../scripts/summarize_synthetic.py"


rule plot_synthetic:
    input:
        **synthetic_inputs(),
    output:
        **{
            name: report(
                f"results/synthetic/{name}.{PLOT_FORMAT}",
                caption=f"../report/synthetic_{name}.rst",
                category="Synthetic addition tasks",
            )
            for name in SYNTHETIC_FIGURES
        },
    log:
        "results/logs/plot_synthetic.log",
    params:
        pairs=synthetic_pairs(),
        tasks=config["synthetic"]["tasks"],
        plots=plot_options(),
    script:
        "../scripts/plot_synthetic.py"
