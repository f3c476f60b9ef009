#!/bin/bash
# Issue 53 item 2, the confirmation: the authors' main.py on the first 320 real training graphs,
# 2 epochs, global row, seed 0: one run (--chunk 2), two chunks of one epoch as their code
# resumes (replay), two chunks with the exact-resume adapter (exact). ABLATE_PROBE=1 makes the
# adapter print the start of every shuffled order and the generator's digest at train().
set -u
cd "$(dirname "$0")/../../.."
. .venv/bin/activate
HERE=benchmarks/results/cpu-2026-12-02-mnist-resume-probe
STATE=/tmp/mnist_probe_state
run() {  # chunk resume-mode
  ABLATE_PROBE=1 nice -n 10 python benchmarks/mnist_train_reference.py --authors "${AUTHORS:-/tmp/gap}" \
    --side authors --row global --seeds 0 --epochs 2 --n-train 320 --chunk "$1" --resume-mode "$2" \
    --state "$STATE" --out "$HERE/records.jsonl" || exit $?
}
run 2 replay
run 1 replay
run 1 exact
for d in "$STATE"/*; do
  cp "$d/progress.json" "$HERE/$(basename "$d").progress.json"
  cp /tmp/mnist_train_reference/authors_"$(basename "$d")"_epochs*.log "$HERE/"
done
python "$HERE/compare.py" "$STATE" > "$HERE/compare.json"
cat "$HERE/compare.json"
