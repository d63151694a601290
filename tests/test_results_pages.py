"""The numbers the docs state about the default run and the paper config: "What the default
run finds" (docs/results.md), README.md's headline and the paper config's plan
(docs/gpus-and-clusters.md).

Recomputed from the configs (slow): the default datasets' tokens and next-token regression
rows (sampled and tokenised as the pipeline does, with SmolLM2's own tokenizer), the trained
model's parameters, and the equi-learning passes configs/paper.yaml plans.

Rendered by docs/results_pages.py (fast): README.md and docs/results.md are their templates
with every number they quote from a default run's tables taken from
docs/default_run_numbers.json, the snapshot that script writes from a default run's results;
and the script's extractions, formats and checks, on a small made-up results folder and
made-up pages."""

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from layerlaws.core.settings import SCHEMA_FILE
from layerlaws.pipeline.expansion import ExpandedConfig
from layerlaws.text.corpus import sample_sentences
from layerlaws.text.tokens import tokenize_sentences

ROOT = Path(__file__).parents[1]

# docs/results_pages.py: the pages that quote a default run's numbers, rendered from their
# templates.
_spec = importlib.util.spec_from_file_location("results_pages", ROOT / "docs" / "results_pages.py")
numbers = sys.modules["results_pages"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(numbers)
SNAPSHOT = json.loads(numbers.SNAPSHOT.read_text())

PAGES = {page: (ROOT / page).read_text() for page in numbers.TEMPLATES}
"""The text of each page the script renders, by page."""
TEMPLATES = numbers.read_templates()
RESULTS = PAGES["docs/results.md"]
"""What the default run finds (docs/results.md)."""
GPUS_AND_CLUSTERS = (ROOT / "docs" / "gpus-and-clusters.md").read_text()
"""Where the paper config's plan is stated."""


def _validated(path: Path) -> dict:
    config = yaml.safe_load(path.read_text())
    validate(config, str(SCHEMA_FILE))
    return config


def _stated(pattern: str, page: str = RESULTS) -> tuple[int, ...]:
    """The numbers ``page`` (docs/results.md unless given) states where ``pattern`` matches
    (commas dropped)."""
    found = re.search(pattern, page)
    assert found, f"the page no longer says {pattern!r}"
    return tuple(int(value.replace(",", "")) for value in found.groups())


@pytest.fixture(scope="module")
def default_config():
    return _validated(ROOT / "config.yaml")


@pytest.fixture(scope="module")
def smollm2_tokenizer(default_config):
    from transformers import AutoTokenizer

    from layerlaws.core.packages import package_file

    source = default_config["models"]["smollm2-135m"]["source"]
    gguf = package_file(source["package"], source["file"])
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


@pytest.mark.slow
def test_the_default_datasets_tokens_and_rows(default_config, smollm2_tokenizer):
    """Tokens of wiki-science and wiki-culture, and their next-token rows: a text token
    followed by a text token of the same text."""
    stated = _stated(
        r"truncated to \d+ tokens: ([\d,]+) and ([\d,]+) tokens, ([\d,]+) and ([\d,]+) "
        r"next-token regression rows"
    )
    counted = []
    for name in ("wiki-science", "wiki-culture"):
        dataset = default_config["datasets"][name]
        sentences = sample_sentences(
            dataset["source"], dataset["n_samples"], dataset["sample_seed"]
        )
        tokens = tokenize_sentences(
            sentences,
            smollm2_tokenizer,
            dataset["max_tokens"],
            dataset["min_tokens"],
            dataset["token_budget"],
            dataset["too_long"],
        ).sort("sentence_id", "position")
        text = ~tokens["is_special"].to_numpy()
        same_text = tokens["sentence_id"].to_numpy()
        rows = int((text[:-1] & text[1:] & (same_text[:-1] == same_text[1:])).sum())
        counted.append((tokens.height, rows))
    assert stated == (counted[0][0], counted[1][0], counted[0][1], counted[1][1])


@pytest.mark.slow
def test_the_trained_models_parameters(default_config, smollm2_tokenizer):
    """wiki-llama as the training stage builds it, its parameters counted by torch."""
    from layerlaws.training.plan import TrainingSpec
    from layerlaws.training.train import initial_model, model_config

    spec = TrainingSpec.of(default_config["training"]["wiki-llama"])
    model = initial_model(spec, model_config(spec, smollm2_tokenizer))
    parameters = sum(parameter.numel() for parameter in model.parameters())
    embeddings = model.get_input_embeddings().weight.numel()
    assert _stated(r"\(([\d,]+) parameters, ([\d,]+) of them the\s+tied embeddings") == (
        parameters,
        embeddings,
    )


@pytest.mark.slow
def test_the_paper_configs_equilearning_passes():
    expanded = ExpandedConfig.from_config(_validated(ROOT / "configs" / "paper.yaml"))
    assert _stated(r"The (\d+) equi-learning passes", GPUS_AND_CLUSTERS) == (len(expanded.runs),)


# docs/results_pages.py: README.md and docs/results.md rendered from their templates and the
# snapshot of a default run's numbers.


def test_the_pages_are_their_templates_rendered_with_the_snapshot():
    """After a default run: `python docs/results_pages.py results --write-snapshot
    docs/default_run_numbers.json`, then `--render`; to change the prose, edit the template
    (docs/templates/) and render."""
    assert numbers.problems(PAGES, TEMPLATES, SNAPSHOT) == []
    assert numbers.main(["--check"]) == 0


def test_the_snapshot_has_exactly_the_scripts_entries():
    names = [entry.name for entry in numbers.ENTRIES]
    assert len(set(names)) == len(names), "two entries share a name"
    assert sorted(SNAPSHOT) == sorted(names)


@pytest.mark.parametrize(
    ("format_", "value", "text"),
    [
        (numbers.fixed(3), -0.97351, "−0.974"),
        (numbers.fixed(3), 0.0296, "0.030"),
        (numbers.fixed(3), -0.0004, "0.000"),
        (numbers.fixed(0), -0.000078, "0"),
        (numbers.signed(3), 0.96329, "+0.963"),
        (numbers.signed(3), -0.6716, "−0.672"),
        (numbers.signed(2), 0.0004, "0.00"),
        (numbers.count, 1048280, "1,048,280"),
        (numbers.count, 2137.93, "2,138"),
        (numbers.percent(0), 0.11446, "11"),
        (numbers.percent(1), 0.42504, "42.5"),
        (numbers.significant(2), 53.08, "53"),
        (numbers.significant(2), 4.1505, "4.2"),
        (numbers.significant(2), 0.51578, "0.52"),
        (numbers.significant(2), 1.000025, "1.0"),
        (numbers.significant(2), 9.96, "10"),
        (numbers.significant(3), 73.128, "73.1"),
        (numbers.significant(3), 7.8374, "7.84"),
    ],
)
def test_formats(format_, value, text):
    assert format_(value) == text


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def made_up_results(tmp_path):
    """A few tables of a results folder, with rows the entries must not pick beside theirs."""
    header = "model,dataset,offset,norm,control,rho,pearson,pr_first,pr_last,overall_decay\n"
    _write(
        tmp_path / "equilearning" / "summary.csv",
        header
        + "smollm2-135m,wiki-science,1,model,none,0.99538,-0.97351,0.87969,0.79619,0.90508\n"
        + "smollm2-135m,wiki-science,1,model,shuffled_vocab,0.998,-0.94648,0.917,0.882,0.96142\n"
        + "smollm2-135m,wiki-science,1,standardize,none,0.99537,-0.97420,0.880,0.796,0.905\n"
        + "smollm2-135m,wiki-science,0,model,none,1.03567,0.96329,0.16544,0.63066,3.81\n"
        + "smollm2-135m,wiki-culture,1,model,none,0.99651,-0.97488,0.86541,0.79770,0.92\n"
        + "wiki-llama@step800,wiki-science,1,model,none,0.998,-0.5,0.5,0.5,0.5\n",
    )
    # The series: the headline's step-0 and step-800 r are wiki-science's, not wiki-culture's.
    _write(
        tmp_path / "series" / "wiki-llama" / "summary.csv",
        "model,dataset,step,pearson\n"
        "wiki-llama@step0,wiki-science,0,0.13005\n"
        "wiki-llama@step0,wiki-culture,0,0.86309\n"
        "wiki-llama@step800,wiki-science,800,-0.99177\n"
        "wiki-llama@step800,wiki-culture,800,-0.97923\n",
    )
    _write(
        tmp_path / "synthetic" / "summary.csv",
        "task,model,epoch,seeds,r_order_mean,r_order_sd,train_accuracy,alignment_label\n"
        "add,linear,10,3,-0.94760,0.00024,0.46773,0.90661\n"
        "add,ffn,10,3,-0.92381,0.02574,0.96989,0.90017\n"
        "mod,linear,10,3,-0.07317,0.14993,0.11446,0.10441\n",
    )
    _write(
        tmp_path / "signatures" / "smollm2-135m" / "wikipedia" / "summary.json",
        json.dumps({"corpus_text_tokens": 1048280, "distinct_tokens": 33350, "bigrams": 1038247}),
    )
    # The prompts' mean: the diagonal (0) and another K and metric are left out.
    depth = ["weights,prompt,layer_a,layer_b,k,metric,miscoupling"]
    for weights, value in (("trained", 0.8), ("random", 0.95)):
        for a in (1, 2, 3):
            for b in (1, 2, 3):
                mis = 0.0 if a == b else value + 0.01 * abs(a - b)
                depth.append(f"{weights},mean,{a},{b},10,paper,{mis}")
                depth.append(f"{weights},mean,{a},{b},30,paper,{mis + 0.1}")
                depth.append(f"{weights},mean,{a},{b},10,unnormalised,{10 * mis}")
                depth.append(f"{weights},0,{a},{b},10,paper,0.5")
    _write(tmp_path / "coupling" / "smollm2-135m" / "paper" / "depth.csv", "\n".join(depth))
    return tmp_path


def test_the_entries_on_a_made_up_results_folder(made_up_results):
    expected = {
        "law.wiki-science.next.r": "−0.974",
        "law.wiki-science.next.rho": "0.9954",
        "law.wiki-science.next.pr_first": "0.880",
        "law.wiki-science.next.pr_last": "0.796",
        "law.wiki-science.current.r": "+0.963",
        "law.wiki-culture.next.r": "−0.975",
        "law.wiki-science.next.shuffled_vocab.decay": "0.961",
        "law.wiki-science.next.decay": "0.905",
        "law.wiki-science.next.standardize.r": "−0.974",
        "synthetic.add.linear.r_order": "−0.948",
        "synthetic.add.linear.r_order_sd": "0.000",
        "synthetic.add.ffn.r_order_sd": "0.026",
        "synthetic.add.ffn.train_accuracy": "0.97",
        "synthetic.mod.linear.train_accuracy.percent": "11",
        "synthetic.add.linear.alignment_label": "0.91",
        "signatures.wikipedia.corpus_text_tokens": "1,048,280",
        "signatures.wikipedia.bigrams": "1,038,247",
        # (0.81 + 0.82 + 0.81 + 0.81 + 0.82 + 0.81) / 6 over the six off-diagonal pairs
        "coupling.depth.paper.k10.trained": "0.813",
        "coupling.depth.paper.k30.random": "1.063",
        "coupling.metrics.unnormalised.k10.trained": "8.133",
        "coupling.depth.paper.k10.trained.distance1": "0.810",
        "headline.law.wiki-science.next.r": "−0.974",
        "headline.law.wiki-science.next.rho": "0.9954",
        "headline.law.wiki-science.next.pr_first": "0.880",
        "headline.law.wiki-science.next.pr_last": "0.796",
        "headline.law.wiki-culture.next.r": "−0.975",
        "headline.series.step0.wiki-science.pearson": "0.130",
        "headline.series.step800.wiki-science.pearson": "−0.992",
        "series.step0.wiki-science.pearson": "+0.13",
        "series.step800.wiki-culture.pearson": "−0.979",
    }
    entries = {entry.name: entry for entry in numbers.ENTRIES}
    assert set(expected) <= set(entries)
    results = numbers.Results(made_up_results)
    assert {name: entries[name].text(results) for name in expected} == expected


def test_an_entry_whose_row_is_missing_or_twice_fails(made_up_results):
    entries = {entry.name: entry for entry in numbers.ENTRIES}
    results = numbers.Results(made_up_results)
    with pytest.raises(LookupError, match="0 rows"):
        entries["law.wiki-science.previous.r"].text(results)
    summary = made_up_results / "synthetic" / "summary.csv"
    summary.write_text(summary.read_text() + "add,linear,10,3,-0.5,0.1,0.5,0.5\n")
    with pytest.raises(LookupError, match="2 rows"):
        entries["synthetic.add.linear.r_order"].text(numbers.Results(made_up_results))


def test_the_pages_are_rendered_and_checked_placeholder_by_placeholder():
    """``rendered`` puts each entry's number in its placeholder; ``problems`` names a page
    that differs from its rendering (its first differing line), a placeholder that names no
    entry, an entry quoted twice or never, and a name only the snapshot or the entries have;
    ``--render`` writes the pages and ``--check`` then finds nothing."""
    entries = [numbers.Entry(name, None, None) for name in ("a.r", "a.rho", "b.r")]
    templates = {
        "a.md": "| a | {{ a.r }} | {{ a.rho }} |\nr = {{ a.r }}? no: {{ b.r }} on `x`\n",
        "b.md": "The headline, unquoted.\n",
    }
    snapshot = {"a.r": "−0.975", "a.rho": "0.99", "b.r": "+0.13"}
    assert numbers.rendered(templates["a.md"], snapshot) == (
        "| a | −0.975 | 0.99 |\nr = −0.975? no: +0.13 on `x`\n"
    )
    assert numbers.problems({}, templates, {**snapshot, "stale": "1"}, entries) == [
        "stale: in the snapshot, not an entry of the script",
        "a.r: quoted 2 times by the templates, not once",
    ]
    templates["a.md"] = "| a | {{ a.r }} | {{ a.rho }} |\nr = {{ c.r }} on `x`\n"
    assert numbers.problems({}, templates, snapshot, entries) == [
        "c.r: a placeholder that names no entry",
        "b.r: quoted 0 times by the templates, not once",
    ]
    with pytest.raises(ValueError, match=r"\{\{ c\.r \}\} names no number"):
        numbers.rendered(templates["a.md"], snapshot)
    templates["a.md"] = "| a | {{ a.r }} | {{ a.rho }} |\nr = {{ b.r }} on `x`\n"
    pages = {"a.md": "| a | −0.974 | 0.99 |\nr = +0.13 on `x`\n", "b.md": templates["b.md"]}
    assert numbers.problems(pages, templates, snapshot, entries) == [
        "a.md:1: '| a | −0.974 | 0.99 |', rendered '| a | −0.975 | 0.99 |'"
    ]


@pytest.fixture
def copied_pages(tmp_path):
    """A copy of the pages and their templates (``--root``)."""
    for page, template in numbers.TEMPLATES.items():
        _write(tmp_path / page, PAGES[page])
        _write(tmp_path / template, TEMPLATES[page])
    return tmp_path


def test_render_writes_the_pages_that_check_then_passes(copied_pages, capsys):
    """``--check`` on a copy of the pages with README.md's step-800 r altered names its
    line; ``--render`` restores the page exactly."""
    tmp_path = copied_pages
    number = SNAPSHOT["headline.series.step800.wiki-science.pearson"]
    assert PAGES["README.md"].count(f"(r = {number})") == 1
    (tmp_path / "README.md").write_text(
        PAGES["README.md"].replace(f"(r = {number})", "(r = −0.991)")
    )
    assert numbers.main(["--check", "--root", str(tmp_path)]) == 1
    assert capsys.readouterr().out.startswith("README.md:")
    assert numbers.main(["--render", "--check", "--root", str(tmp_path)]) == 0
    assert {page: (tmp_path / page).read_text() for page in numbers.TEMPLATES} == PAGES


def test_a_wrong_snapshot_value_is_rendered_and_checked(copied_pages, tmp_path_factory, capsys):
    """A snapshot whose r of the previous-token law is −0.672 for +0.672: ``--check`` names
    that line of the law table, and ``--render`` writes it there, nothing else."""
    assert SNAPSHOT["law.wiki-science.previous.r"] == "+0.672"
    wrong = tmp_path_factory.mktemp("snapshot") / "numbers.json"
    wrong.write_text(json.dumps({**SNAPSHOT, "law.wiki-science.previous.r": "−0.672"}))
    arguments = ["--root", str(copied_pages), "--snapshot", str(wrong)]
    assert numbers.main(["--check", *arguments]) == 1
    line = next(line for line in RESULTS.splitlines() if line.startswith("| wiki-science | prev"))
    assert capsys.readouterr().out == (
        f"docs/results.md:{RESULTS.splitlines().index(line) + 1}: {line!r}, rendered "
        f"{line.replace('| +0.672 |', '| −0.672 |')!r}\n"
    )
    assert numbers.main(["--render", *arguments]) == 0
    assert (copied_pages / "docs/results.md").read_text() == RESULTS.replace(
        line, line.replace("| +0.672 |", "| −0.672 |")
    )
    assert (copied_pages / "README.md").read_text() == PAGES["README.md"]


def test_render_stops_at_a_placeholder_that_names_no_number(copied_pages, capsys):
    """A template's placeholder with no number in the snapshot: a line naming the template,
    the placeholder and what to do, and no page written."""
    template = copied_pages / numbers.TEMPLATES["docs/results.md"]
    template.write_text(template.read_text() + "r = {{ law.wiki-science.next.r2 }}\n")
    (copied_pages / "README.md").write_text("stale")
    with pytest.raises(SystemExit) as stopped:
        numbers.main(["--render", "--root", str(copied_pages)])
    assert stopped.value.code == 1
    assert capsys.readouterr().err == (
        "docs/templates/results.md: placeholder {{ law.wiki-science.next.r2 }} names no number "
        f"of the snapshot {numbers.SNAPSHOT}: name an entry of docs/results_pages.py there, "
        "or add the entry and write the snapshot\n"
    )
    assert (copied_pages / "README.md").read_text() == "stale"
    assert (copied_pages / "docs/results.md").read_text() == RESULTS


FIGURE = re.compile(r"!\[[^\]]*\]\(([^)\s]+\.png)\)")


@pytest.mark.parametrize("page", ["README.md", "docs/results.md"], ids=["readme", "results"])
def test_the_figures_a_page_shows_are_drawn_images_of_a_sane_size(page):
    from PIL import Image, ImageStat

    source = ROOT / page
    shown = FIGURE.findall(source.read_text())
    assert shown
    for name in shown:
        with Image.open(source.parent / name) as image:
            image.load()
            width, height = image.size
            spread = ImageStat.Stat(image.convert("L")).stddev[0]
        assert 300 <= width <= 4000 and 150 <= height <= 4000, (name, image.size)
        assert spread > 5, f"{name} is blank (grey-level spread {spread:.1f})"
