#!/usr/bin/env bash
# The GPU check in one command, on one H100-class GPU with nothing downloaded, in at most
# 8 minutes: the CUDA tests (pytest -m cuda), bench/bf16.py on the GPU (a random model of
# SmolLM2's shapes: the package of the real one does not travel), and bench/gpu_pass.py (the
# model pass against a bare bfloat16 forward, and a coupling product against its floor, on
# a random model of Qwen2.5-1.5B's shapes). One line per figure; the last:
#   gpu_pass_vs_forward=… gpu_coupling_product_vs_floor=… cuda_tests=<passed>/<total>
#
# Packages the GPU machine's image lacks travel as wheels in .whl/ (git-ignored; fetch them
# here with bench/gpu_wheels.sh: polars and the offline Wikipedia texts, about 60 MB).
# PYTHON picks the interpreter (python3 by default: the one with a CUDA build of torch).
# The CUDA tests' report is written to $OUT/cuda.xml when OUT is set.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
REPORT=${OUT:-$(mktemp -d)}/cuda.xml
if [ -d .whl ]; then
    $PYTHON -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/layerlaws-site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/layerlaws-site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
$PYTHON -c 'import torch, sys; torch.cuda.is_available() or sys.exit(
    "bench/gpu_check.sh: no CUDA device is visible to " + sys.executable
    + "; run it on a machine with a GPU (PYTHON names an interpreter with a CUDA torch)")' ||
    exit 1
started=$SECONDS

timeout 240 $PYTHON -m pytest tests/cuda -m cuda -q -p no:cacheprovider -o addopts= \
    --junitxml="$REPORT"
cuda_tests=$($PYTHON - "$REPORT" <<'PY'
import sys
import xml.etree.ElementTree as ElementTree

try:
    suite = ElementTree.parse(sys.argv[1]).getroot()
except (OSError, ElementTree.ParseError):
    print("0/0")
    sys.exit()
suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
total = int(suite.get("tests"))
failed = sum(int(suite.get(kind, 0)) for kind in ("failures", "errors", "skipped"))
print(f"{total - failed}/{total}")
PY
)
echo "cuda_tests=$cuda_tests ($((SECONDS - started)) s)"

timeout 120 $PYTHON bench/bf16.py --random --device cuda | tail -n 4
timeout 150 $PYTHON bench/gpu_pass.py --device cuda | tee /tmp/layerlaws-gpu-pass.txt
figures=$(tail -n 1 /tmp/layerlaws-gpu-pass.txt | grep '^gpu_pass_vs_forward=' ||
    echo "gpu_pass_vs_forward=failed gpu_coupling_product_vs_floor=failed")
echo "($((SECONDS - started)) s in all)"
echo "$figures cuda_tests=$cuda_tests"
