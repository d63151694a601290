# The composite addition tasks of Yao & Xu (§5): data, probability
# signatures, linear and one-hidden-layer embedding models trained for several seeds.
from layerlaws.synthetic.settings import (
    SyntheticDataSettings,
    SyntheticPlotSettings,
    SyntheticTrainingSettings,
)
from layerlaws.synthetic.workflow import SYNTHETIC_FIGURES


rule synthetic_data:
    output:
        data=f"{LAYOUT.synthetic_task()}/data.npz",
        signatures=f"{LAYOUT.synthetic_task()}/signatures.npz",
        summary=report(
            f"{LAYOUT.synthetic_task()}/signatures.csv",
            caption="../report/synthetic_signatures_table.rst",
            category="Synthetic addition tasks",
        ),
    log:
        LAYOUT.log("synthetic_data", "{task}"),
    params:
        settings=SyntheticDataSettings.params(config["synthetic"]),
    script:
        "../scripts/synthetic_data.py"


rule train_synthetic:
    input:
        data=f"{LAYOUT.synthetic_task()}/data.npz",
        signatures=f"{LAYOUT.synthetic_task()}/signatures.npz",
    output:
        r_order=f"{LAYOUT.synthetic_model()}/r_order.csv",
        weights=f"{LAYOUT.synthetic_model()}/weights.npz",
    log:
        LAYOUT.log("train_synthetic", "{task}", "{model}"),
    threads: 1
    params:
        settings=SyntheticTrainingSettings.params(config["synthetic"]),
    script:
        "../scripts/train_synthetic.py"


rule summarize_synthetic:
    input:
        **TARGETS.synthetic_inputs(),
    output:
        summary=report(
            f"{LAYOUT.synthetic()}/summary.csv",
            caption="../report/synthetic_summary.rst",
            category="Synthetic addition tasks",
        ),
        paper_comparison=report(
            f"{LAYOUT.synthetic()}/paper_comparison.csv",
            caption="../report/synthetic_paper_comparison.rst",
            category="Synthetic addition tasks",
        ),
    log:
        LAYOUT.log("summarize_synthetic"),
    params:
        pairs=TARGETS.synthetic_pairs(),
        tasks=config["synthetic"]["tasks"],
    script:
        "../scripts/summarize_synthetic.py"


rule plot_synthetic:
    input:
        **TARGETS.synthetic_inputs(),
    output:
        **{
            name: report(
                f"{LAYOUT.synthetic()}/{name}.{PLOT_FORMAT}",
                caption=f"../report/synthetic_{name}.rst",
                category="Synthetic addition tasks",
            )
            for name in SYNTHETIC_FIGURES
        },
    log:
        LAYOUT.log("plot_synthetic"),
    params:
        pairs=TARGETS.synthetic_pairs(),
        tasks=config["synthetic"]["tasks"],
        plots=plot_options(config),
        settings=SyntheticPlotSettings.params(config["synthetic"]),
    script:
        "../scripts/plot_synthetic.py"
