"""Host memory one pack of graph trials needs, from its prepared dataset's sizes.

The runner declares it to Ray as the trial's ``memory`` resource, so Ray never starts more
trials on a node than its memory holds (`ablate.runner.execute.driver`). It adds up what a worker
keeps (`ablate.trial.batches`, `ablate.trial.evaluate`):

- the worker itself: Python with torch, PyG, Ray and ablate imported (`WORKER_BYTES`);
- the prepared file, memory-mapped: every page of it may be read during a trial;
- the training split, collated once where it fits (`collated_entries`), else one batch;
- the validation batches kept for the curves (point graphs: features and centroids);
- the working set of the largest evaluation batch: its adjacency, the stacked
  propagation operator (K blocks), the adjacency's float64 derivation for point graphs,
  and the activations of the members evaluated together; leave-one-out attention's
  chunks (`ablate.trial.pack_loo.CHUNK_ENTRIES`) where the dataset has ground truth.

`benchmarks/bench_memory.py` sets the estimate beside the measured peak memory of real
trials at full size; `tests/test_host_memory.py` checks that Ray runs no more trials than
the declared memory fits (it does not check the estimate itself).
"""

from __future__ import annotations

from ablate.config import TrialConfig

WORKER_BYTES = 900 << 20  # a trial worker before its data: the interpreter and its libraries
F32 = 4
EVAL_ENTRIES = 2_000_000  # adjacency entries of an evaluation batch (`batches.eval_batches`)
LOO_ENTRIES = 16_000_000  # entries of a leave-one-out chunk (`pack_loo.CHUNK_ENTRIES`)
SLACK = 1.25  # allocator fragmentation and what this sum leaves out


def pack_bytes(cfgs: list[TrialConfig], data: dict, precollate_entries: int,
               keep_entries: int) -> int:
    """Bytes of host memory a worker needs to run `cfgs` (one pack, one dataset recipe) on a
    CPU, from the recipe's `ablate.data.cache.footprint` `data`; `precollate_entries` and
    `keep_entries`: how many entries `TrainBatches` and `eval_batches` keep collated."""
    cfg = cfgs[0]
    members = sum(len(c.seeds) for c in cfgs)
    splits = data["splits"]
    width = max([s["channels"] for s in splits.values()] + list(cfg.filters) + [cfg.hidden or 0])
    need = _kept(splits["train"], precollate_entries, cfg.batch_size)
    if "val" in splits:
        need += _kept(splits["val"], keep_entries, 0)
    biggest = max(s["max_nodes"] for s in splits.values())
    entries = max(EVAL_ENTRIES, biggest * biggest)  # one evaluation batch's adjacency
    need += F32 * entries * (cfg.K + 3)  # A, the stacked operator, the float64 derivation
    nodes = entries // max(biggest, 1)  # nodes of that batch
    need += F32 * nodes * width * 8 * min(members, 8)  # activations of the members at once
    tests_gt = any(s.get("gt", True) for k, s in splits.items() if k not in ("train", "val"))
    if not cfg.pool_layers and cfg.loo_auc and tests_gt:
        need += F32 * LOO_ENTRIES * (cfg.K + 2)
    if cfg.supervision == "weak":  # per-member targets of the training nodes
        need += F32 * members * splits["train"]["nodes"]
    return int(WORKER_BYTES + data["bytes"] + SLACK * need)


def _kept(split: dict, limit: int, batch: int) -> int:
    """Bytes of a split kept collated (`collated_entries`), or of one batch of it when the
    split is larger than `limit` entries (`batch` graphs; 0: none kept)."""
    n, c = split["max_nodes"], split["channels"]
    per_graph = n * (c + 4) if split["points"] else n * (n + c + 2)
    if split["graphs"] * per_graph <= limit:
        return F32 * split["graphs"] * per_graph
    return F32 * batch * per_graph
