#!/bin/bash
# Issue 53 item 2: the authors' MNIST-75SP global row at full size as ONE run (exact resume),
# seeds one at a time, in chunks of 5 epochs. Rerun to resume: finished seeds are skipped and an
# unfinished one continues from runs/authors_global_e30_nall_published_c5_exact_seed<S>/.
# AUTHORS: a checkout of bknyaz/graph_attention_pool at 00a6771 (default /tmp/gap).
set -u
cd "$(dirname "$0")/../../.."
. .venv/bin/activate
AUTHORS=${AUTHORS:-/tmp/gap}
OUT=benchmarks/results/cpu-2026-12-02-mnist-fullsize-exact/records.jsonl
for s in ${SEEDS:-0 1 2}; do
  nice -n 15 python benchmarks/mnist_train_reference.py --authors "$AUTHORS" --side authors \
    --row ${ROW:-global} --seeds "$s" --resume-mode exact --out "$OUT" || exit $?
done
