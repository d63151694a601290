"""A config file's problems in a few lines: its YAML (where it does not parse, keys given
twice, words YAML 1.1 reads as booleans) and its values against the schema; and the
command that checks a file Snakemake cannot read."""

import pytest
import yaml

from layerlaws.core.config_errors import (
    MOST_PROBLEMS,
    main,
    schema_problems,
    yaml_problems,
)


def test_yaml_that_does_not_parse_is_named_with_its_line_and_column():
    [found] = yaml_problems("models:\n  a: {source: {kind: local, path: [x}\n", "my.yaml")
    assert found == (
        "my.yaml: not valid YAML: while parsing a flow sequence (line 2, column 35): expected "
        "',' or ']', but got '}' (line 2, column 37)"
    )
    [tab] = yaml_problems("models:\n\ta: {}\n", "my.yaml")
    assert tab.endswith("found character '\\t' that cannot start any token (line 2, column 1)")


def test_keys_given_twice_are_found_at_any_depth_with_both_lines():
    text = "models:\n  a:\n    dtype: float32\n    dtype: bfloat16\n  b: {}\nruns: []\nruns: []\n"
    assert yaml_problems(text, "c.yaml") == [
        "c.yaml, line 7: the key 'runs' is given twice in one block (also on line 6); YAML "
        "would keep only the last: remove or rename one",
        "c.yaml, line 4: the key 'dtype' is given twice in one block (also on line 3); YAML "
        "would keep only the last: remove or rename one",
    ]
    assert (
        yaml_problems(
            text.replace("    dtype: bfloat16\n", "").replace("runs: []\n", "", 1), "c.yaml"
        )
        == []
    )


def test_only_plain_words_read_as_booleans_are_keys_to_quote():
    text = "datasets:\n  on: {}\n  'off': {}\n  No: {}\n  only: {}\n"
    assert [line.split(": the key ")[1][:3] for line in yaml_problems(text, "c.yaml")] == [
        "on ",
        "No ",
    ]


def test_an_empty_file_has_no_yaml_problem():
    assert yaml_problems("", "c.yaml") == []


def test_values_are_named_with_what_they_may_be_and_yaml_surprises_explained():
    config = {"synthetic": {"learning_rate": "1e5", "epochs": True}}
    assert schema_problems(config) == [
        "synthetic.epochs: True is not allowed: expected integer ≥ 1 (YAML reads on, off, yes "
        "and no as booleans: quote a name, as in 'on')",
        "synthetic.learning_rate: '1e5' is not allowed: expected number > 0 (YAML 1.1 reads "
        "1e5 as text, not a number: write 1.0e+5)",
    ]


def test_many_problems_are_cut_to_the_first_ten_and_a_count():
    config = {f"key{index:02d}": 1 for index in range(MOST_PROBLEMS + 3)}
    found = schema_problems(config)
    assert len(found) == MOST_PROBLEMS + 1 and found[-1] == "… and 3 more"
    assert found[0] == (
        "key00: unknown key; known keys: coupling, datasets, equilearning, execution, "
        "hidden_states, hub_files, models, plots, rehearsal, runs, series, signatures, "
        "synthetic, training"
    )


def test_the_command_checks_files_snakemake_cannot_read(tmp_path, capsys):
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump({"equilearning": {"norms": ["model"]}}))
    assert main([str(good)]) == 0
    assert capsys.readouterr().out == f"no problems in {good}\n"
    broken = tmp_path / "broken.yaml"
    broken.write_text("runs: [\n")
    missing = tmp_path / "missing.yaml"
    assert main([str(broken), str(missing)]) == 1
    printed = capsys.readouterr().out
    assert printed.startswith("The config is not valid (2 problems):\n")
    assert f"  - {broken}: not valid YAML: while parsing a flow node (line 2, column 1)" in printed
    assert f"  - {missing}: cannot be read (No such file or directory)" in printed


@pytest.mark.parametrize("text", ["equilerning: {}\n", "equilearning: {norms: [layer]}\n"])
def test_the_command_reports_schema_problems_of_a_file_that_parses(tmp_path, capsys, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    assert main([str(path)]) == 1
    assert "(1 problem)" in capsys.readouterr().out
