"""The README's numbers about the default run and the paper config, recomputed from the
configs: the default datasets' tokens and next-token regression rows (sampled and
tokenised as the pipeline does, with SmolLM2's own tokenizer), the trained model's
parameters, and the equi-learning passes configs/paper.yaml plans."""

import re
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from layerlaws.pipeline.expansion import ExpandedConfig
from layerlaws.text.corpus import sample_sentences
from layerlaws.text.tokens import tokenize_sentences

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text()


def _validated(path: Path) -> dict:
    config = yaml.safe_load(path.read_text())
    validate(config, str(ROOT / "schemas" / "config.schema.yaml"))
    return config


def _stated(pattern: str) -> tuple[int, ...]:
    """The numbers the README states where ``pattern`` matches (commas dropped)."""
    found = re.search(pattern, README)
    assert found, f"the README no longer says {pattern!r}"
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


def test_the_paper_configs_equilearning_passes():
    expanded = ExpandedConfig.from_config(_validated(ROOT / "configs" / "paper.yaml"))
    assert _stated(r"The (\d+) equi-learning passes") == (len(expanded.runs),)
