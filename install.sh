#!/usr/bin/env bash
# Install ablate with a torch build that fits the machine, then the project itself.
#   bash install.sh            # library + CLI
#   bash install.sh "[test]"   # plus pytest and ruff
# A GPU machine (nvidia-smi works) gets PyPI's CUDA build of torch 2.13.0. A CPU machine
# gets the CPU build (2.13.0+cpu: from a local wheel folder where pip is configured with
# one, else PyTorch's CPU index) and never downloads CUDA. An installed torch is kept.
set -euo pipefail
extras="${1:-}"
py="${PYTHON:-python3}"
cd "$(dirname "$0")"
if ! "$py" -c "import torch" >/dev/null 2>&1; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    "$py" -m pip install "torch==2.13.0"
  elif ! "$py" -m pip install "torch==2.13.0+cpu"; then
    "$py" -m pip install "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu
  fi
fi
"$py" -m pip install -e ".${extras}"
