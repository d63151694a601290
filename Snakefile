# layerlaws: the layer-wise laws of large language models.
# A table of contents: start-up in rules/common.smk, then one rule file per stage
# (layerlaws/pipeline/stages.py: STAGES).
from snakemake.utils import min_version

min_version("9.27.1")


# The embedded defaults, unless the user gives a config file of their own (Snakemake would
# otherwise merge the two, leaking default models and datasets into the user's run).
if not workflow.overwrite_configfiles:

    configfile: "config.yaml"


report: "report/workflow.rst"


include: "rules/common.smk"


wildcard_constraints:
    model=WILDCARDS["model"],
    dataset=WILDCARDS["key"],
    prompts=WILDCARDS["key"],
    training=WILDCARDS["key"],
    series=WILDCARDS["key"],
    task=WILDCARDS["task"],


for rule_file in RULE_FILES:

    include: rule_file


rule all:
    default_target: True
    input:
        TARGETS.final_outputs(),
