# Stage 6: Jacobian coupling of transformer blocks and hidden trajectories, for the
# trained model and its randomly initialised twin.


rule measure_coupling:
    input:
        model="results/models/{model}",
        sentences=prompt_sentences,
        initial=initial_model,
    output:
        depth="results/coupling/{model}/{prompts}/depth.csv",
        singular_values="results/coupling/{model}/{prompts}/singular_values.csv",
        tokens="results/coupling/{model}/{prompts}/tokens.csv",
        factors="results/coupling/{model}/{prompts}/factors.npz",
        trajectories="results/trajectories/{model}/{prompts}/tokens.csv",
        layers="results/trajectories/{model}/{prompts}/layers.csv",
        streams="results/trajectories/{model}/{prompts}/streams.npz",
    log:
        "results/logs/measure_coupling/{model}/{prompts}.log",
    threads: 4
    resources:
        **needs(PLANNER.measure_coupling),
    params:
        prompts=lambda wildcards: config["coupling"]["prompts"][wildcards.prompts],
        ks=config["coupling"]["ks"],
        token_layers=config["coupling"]["token_layers"],
        fixed_input_token=config["coupling"]["fixed_input_token"],
        fixed_output_token=config["coupling"]["fixed_output_token"],
        final_norm=config["coupling"]["final_norm"],
        svd=config["coupling"]["svd"],
        init_seed=config["coupling"]["init_seed"],
        lss_window=config["coupling"]["lss_window"],
        dtype=model_dtype,
    script:
        "../scripts/measure_coupling.py"


rule plot_coupling:
    input:
        depth="results/coupling/{model}/{prompts}/depth.csv",
        singular_values="results/coupling/{model}/{prompts}/singular_values.csv",
        tokens="results/coupling/{model}/{prompts}/tokens.csv",
        trajectories="results/trajectories/{model}/{prompts}/tokens.csv",
        layers="results/trajectories/{model}/{prompts}/layers.csv",
        streams="results/trajectories/{model}/{prompts}/streams.npz",
    output:
        **{
            name: report(
                f"results/coupling/{{model}}/{{prompts}}/{name}.{PLOT_FORMAT}",
                caption=f"../report/coupling_{name}.rst",
                category="Block coupling",
                subcategory="{model} on {prompts}",
            )
            for name in COUPLING_FIGURES
        },
        **{
            name: report(
                f"results/trajectories/{{model}}/{{prompts}}/{name}.{PLOT_FORMAT}",
                caption=f"../report/trajectories_{name}.rst",
                category="Trajectories",
                subcategory="{model} on {prompts}",
            )
            for name in TRAJECTORY_FIGURES
        },
    log:
        "results/logs/plot_coupling/{model}/{prompts}.log",
    params:
        plots=plot_options(),
        title="{model} on {prompts}",
    script:
        "../scripts/plot_coupling.py"
