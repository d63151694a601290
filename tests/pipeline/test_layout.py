"""Every path a rule declares (outputs and logs) is the layout's: its folder, or the file,
is what a Layout method gives with the rule's wildcards unfilled."""

import re
from pathlib import Path

import pytest

from layerlaws.pipeline.layout import Layout

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def rules(tmp_path_factory):
    """The rules of the workflow on config.yaml, parsed by Snakemake's API (no DAG)."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

    with SnakemakeApi(OutputSettings()) as api:
        workflow = api.workflow(
            resource_settings=ResourceSettings(cores=1),
            config_settings=ConfigSettings(configfiles=[REPO / "config.yaml"]),
            snakefile=REPO / "Snakefile",
            workdir=tmp_path_factory.mktemp("workdir"),
        )
        return list(workflow._workflow.rules)


def patterns(files):
    """File patterns as declared, without the wildcard constraints Snakemake adds."""
    from snakemake.io import strip_wildcard_constraints

    return [strip_wildcard_constraints(str(path)) for path in files]


def test_every_rule_output_lies_where_the_layout_puts_it(rules):
    layout = Layout()
    folders, files = set(layout.folders().values()), set(layout.files().values())
    outputs = [(rule.name, path) for rule in rules for path in patterns(rule.output)]
    assert len(outputs) > 50
    for rule, path in outputs:
        assert path in files or path in folders or path.rsplit("/", 1)[0] in folders, (rule, path)


def test_every_rule_logs_where_the_layout_puts_it(rules):
    layout = Layout()
    for rule in rules:
        if rule.name in ("all", "download"):  # targets: no job of their own
            continue
        (log,) = patterns(rule.log)
        assert log == layout.log(rule.name, *re.findall(r"\{\w+\}", log)), rule.name


def test_the_moved_trajectories_lie_in_the_coupling_folder(rules):
    (measure,) = (rule for rule in rules if rule.name == "measure_coupling")
    folder = Layout().coupling()
    outputs = patterns(measure.output)
    assert all(path.startswith(f"{folder}/") for path in outputs)
    assert f"{folder}/trajectories/tokens.csv" in outputs
