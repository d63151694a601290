"""Shared fixtures: tiny tokenizers and randomly initialised models, a tiny corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny_models import save_tiny_model
from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from layerlaws.sources import wikipedia_summaries

REPO = Path(__file__).resolve().parent.parent


def corpus_texts(count: int = 80) -> list[str]:
    """Real English texts from the offline Wikipedia summaries (deterministic)."""
    return [text for text, _ in wikipedia_summaries({"topics": ["Mathematics"]})[:count]]


def build_tokenizer(texts: list[str], add_bos: bool, padding_side: str) -> PreTrainedTokenizerFast:
    """A word-level tokenizer trained on ``texts``: Llama-like (adds BOS, pads left) or
    GPT-2-like (no BOS, pads right)."""
    core = Tokenizer(models.WordLevel(unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "<pad>"])
    core.train_from_iterator(texts, trainer)
    if add_bos:
        core.post_processor = processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", core.token_to_id("<s>"))]
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        unk_token="<unk>",
        bos_token="<s>",
        pad_token="<pad>",
        padding_side=padding_side,
    )


TEST_SIZES = {
    "hidden_size": 24,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "max_position_embeddings": 128,
}
"""Sizes of the tiny Llama and GPT-2 of the workflow tests (4 layers, hidden size 24)."""


def llama_tokenizer(texts: list[str]) -> PreTrainedTokenizerFast:
    """Llama-like: adds BOS, pads on the left."""
    return build_tokenizer(texts, add_bos=True, padding_side="left")


@pytest.fixture(scope="session")
def texts() -> list[str]:
    return corpus_texts()


@pytest.fixture(scope="session")
def llama_folder(tmp_path_factory: pytest.TempPathFactory, texts: list[str]) -> Path:
    return save_tiny_model(
        tmp_path_factory.mktemp("llama"), "llama", llama_tokenizer(texts), **TEST_SIZES
    )


@pytest.fixture(scope="session")
def gpt2_folder(tmp_path_factory: pytest.TempPathFactory, texts: list[str]) -> Path:
    """GPT-2-like: no BOS, pads on the right, tied embeddings."""
    tokenizer = build_tokenizer(texts, add_bos=False, padding_side="right")
    return save_tiny_model(tmp_path_factory.mktemp("gpt2"), "gpt2", tokenizer, **TEST_SIZES)


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory: pytest.TempPathFactory, texts: list[str]) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "texts.jsonl"
    path.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
    return path
