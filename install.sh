#!/usr/bin/env bash
# Install ablate with a torch build that fits the machine, then the locked packages, then ablate.
#   bash install.sh                   # library + CLI + test tools, at the lock file's versions
#   bash install.sh "[test]"          # the same (the lock holds the test tools too)
#   bash install.sh --latest "[test]" # the newest versions pyproject.toml's ranges allow
# A GPU machine (nvidia-smi works) gets PyPI's CUDA build of torch 2.13.0. A CPU machine
# gets the CPU build (2.13.0+cpu: from a local wheel folder where pip is configured with
# one, else PyTorch's CPU index) and never downloads CUDA. An installed torch is kept.
# Every other package comes from lock/requirements.lock (exact versions and hashes; refresh
# it with `python lock/refresh.py`), unless --latest.
set -euo pipefail
latest=0
if [ "${1:-}" = "--latest" ]; then latest=1; shift; fi
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
if [ "$latest" = 1 ]; then
  "$py" -m pip install -e ".${extras}"
else
  "$py" -m pip install --require-hashes -r lock/requirements.lock
  "$py" -m pip install --no-deps -e ".${extras}"
fi
