"""Evaluation of a pack on the device (ablate/trial/pack_eval.py) equals `summarize` per member."""

import math

import pytest
import torch
from _packs import CPU, TINY, TRI, tmp_cache  # noqa: F401 (tmp_cache: autouse fixture)
from torch.profiler import ProfilerActivity, profile

from ablate.config import TrialConfig, resolve
from ablate.data import load_graphsets
from ablate.trial import metrics
from ablate.trial import packed as batched
from ablate.trial.batches import TrainBatches, eval_batches
from ablate.trial.evaluate import evaluate, pool_test_auc
from ablate.trial.pack_eval import CURVE_KEYS, attention_auc_pack, pool_test_auc_pack, summarize_pack
from ablate.trial.weak import leave_one_out_batch, weak_attention, weak_floor

SYNCS = ("aten::_local_scalar_dense", "aten::item", "aten::nonzero", "aten::is_nonzero")


def tiny(**kw) -> TrialConfig:
    base = dict(dataset="colors", data_params=TINY, epochs=2, seeds=(0, 1, 2), device="cpu",
                test_batch_size=16)
    return resolve(TrialConfig(**{**base, **kw}))


def _trained(cfg: TrialConfig, seeds=None):
    """A stack of cfg's seeds after cfg.epochs of training (attention not trivial), its splits."""
    splits = load_graphsets(cfg.dataset, **cfg.data_kwargs)
    members = [batched.Member(cfg, s) for s in (seeds or cfg.seeds)]
    in_ch = splits["train"].num_features
    out_ch = 1 if cfg.dataset in ("colors", "triangles") else int(max(splits["train"].y)) + 1
    stack = batched.MemberStack(members, in_ch, out_ch, CPU)
    failed, _ = batched.fit_members(stack, TrainBatches(splits["train"], CPU), cfg, CPU, False)
    assert not failed
    return stack, splits


def _close(a, b, key: str) -> bool:
    if isinstance(b, float) and math.isnan(b):
        return isinstance(a, float) and math.isnan(a)
    if key in ("accuracy", "n_graphs"):
        return a == b and type(a) is type(b)
    if isinstance(b, float):
        return isinstance(a, float) and abs(a - b) <= 1e-6 * max(1.0, abs(b))
    return a == b


def _same_nested(k: str, a, b) -> bool:
    """Equal `acc_by_size` / `gt_mass_curve`, both in the store's form (a list of structs, or
    None), as the eager and the pack's evaluation give them."""
    assert all(v is None or isinstance(v, list) for v in (a, b)), (k, a, b)
    x, y = a, b
    if x is None or y is None:
        return x is None and y is None
    num = "accuracy" if k == "acc_by_size" else "fraction"
    return len(x) == len(y) and all(
        {f: v for f, v in p.items() if f != num} == {f: v for f, v in q.items() if f != num}
        and abs(p[num] - q[num]) <= 1e-9 for p, q in zip(x, y))


def _assert_record(got: dict, ref: dict, where) -> None:
    assert list(got) == list(ref), where  # same fields, same order
    for k, b in ref.items():
        a = got[k]
        if k in ("acc_by_size", "gt_mass_curve"):
            assert _same_nested(k, a, b), (where, k, a, b)
        else:
            assert _close(a, b, k), (where, k, a, b)


def _check(cfg: TrialConfig, alive: list[int], seeds=None) -> None:
    """Device records and pooled AUC of the members `alive` against `evaluate` + `pool_test_auc`
    of each materialised member, on every evaluation split (several batches each)."""
    stack, splits = _trained(cfg, seeds)
    results, refs = {}, {i: [] for i in alive}
    for split, gs in splits.items():
        if split == "train":
            continue
        batches = eval_batches(gs, cfg.test_batch_size, CPU)
        assert len(batches) > 1
        loo = cfg.loo_auc and not cfg.pool_layers and split != "val"
        res = batched.evaluate_members(stack, alive, batches, cfg, loo=loo)
        results[split] = res
        assert len(res.records) == len(alive)
        curve = batched.evaluate_members(stack, alive, batches, cfg, fields="curve").records
        for j, i in enumerate(alive):
            ref = evaluate(stack.materialise(i), batches, cfg, loo=loo)
            ref["split"] = split
            refs[i].append(ref)
            _assert_record(res.records[j], {k: v for k, v in ref.items()
                                            if k not in ("_attention", "split")}, (i, split))
            if not loo:
                _assert_record(curve[j], {k: ref[k] for k in CURVE_KEYS}, (i, split, "curve"))
    pooled = pool_test_auc_pack(results, cfg.dataset)
    assert len(pooled) == len(alive)
    for j, i in enumerate(alive):
        pool_test_auc(refs[i], cfg.dataset)
        want = {k: v for k, v in refs[i][0].items() if k.startswith("attn_auc_pooled")}
        assert want and list(pooled[j]) == list(want)
        assert all(_close(pooled[j][k], want[k], k) for k in want), (i, pooled[j], want)


@pytest.mark.parametrize("kw", [
    dict(supervision="unsup"),
    dict(supervision="sup"),
    dict(supervision="sup", selection="topk", ratio=0.3),
    dict(dataset="triangles", data_params=TRI, seeds=(0, 1), supervision="sup", test_batch_size=8),
])
def test_device_evaluation_equals_summarize(kw):
    cfg = tiny(**kw)
    if cfg.dataset == "triangles":
        assert len(cfg.pool_layers) == 2  # layer 1 scores a different node set per member
    _check(cfg, list(range(len(cfg.seeds))))


LOO = (("n_max_large", 30), ("n_test", 16), ("n_train", 32), ("n_val", 16))


def test_global_pool_leave_one_out_equals_summarize():
    """Global pooling: no attention on val, leave-one-out attention (`pack_loo`, all members
    together) on the test splits."""
    _check(tiny(pool_layers=(), loo_auc=True, seeds=(0, 1, 2), data_params=LOO, test_batch_size=6),
           [0, 2])


def test_leave_one_out_callable_of_stacked_members():
    """`summarize_pack` with any `loo_alpha(batch) -> (S, B, N)`: here each member's own
    `leave_one_out_batch`, stacked, as `evaluate(..., loo=True)` computes it."""
    cfg = tiny(pool_layers=(), loo_auc=True, seeds=(0, 1), data_params=LOO, test_batch_size=6)
    stack, splits = _trained(cfg)
    models = [stack.materialise(i).eval() for i in (0, 1)]

    def loo_alpha(b):
        raw = torch.stack([leave_one_out_batch(m, b, target=cfg.weak_target) for m in models])
        return weak_attention(raw, b.mask, weak_floor(cfg))

    batches = eval_batches(splits["test_large"], cfg.test_batch_size, CPU)
    with torch.no_grad():
        res = summarize_pack(batched._eval_forward(stack, [0, 1], batches, cfg), 0,
                             stack.regression, loo_alpha)
    for j, m in enumerate(models):
        ref = evaluate(m, batches, cfg, loo=True)
        _assert_record(res.records[j], {k: v for k, v in ref.items() if k != "_attention"}, j)


def test_global_pool_without_attention_is_nan():
    cfg = tiny(pool_layers=(), loo_auc=False, seeds=(0, 1), epochs=1)
    _check(cfg, [0, 1])


def test_alive_subset_and_member_chunks_do_not_change_members(monkeypatch):
    """Members [0, 2] of 3 (member 1 went NaN) equal `summarize`; a member's numbers do not
    depend on the others alive, their order, or on the forward running in chunks of members."""
    cfg = tiny(supervision="sup")
    _check(cfg, [0, 2])
    stack, splits = _trained(cfg)
    batches = eval_batches(splits["test_large"], cfg.test_batch_size, CPU)
    every = batched.evaluate_members(stack, [0, 1, 2], batches, cfg).records
    some = batched.evaluate_members(stack, [2, 0], batches, cfg).records
    monkeypatch.setattr(batched, "EVAL_ENTRIES", 1)  # one member per vmapped forward
    chunked = batched.evaluate_members(stack, [0, 1, 2], batches, cfg).records
    for a, b in ((some[0], every[2]), (some[1], every[0]), *zip(chunked, every)):
        _assert_record(a, b, "alive")


def test_cpu_graph_slices_give_the_records_of_whole_batches(monkeypatch):
    """On a CPU eval batches run in slices of graphs (cache-sized): the records are exactly
    those of one forward per batch, for a pooled and a two-pool (TRIANGLES) model."""
    tri = resolve(TrialConfig(dataset="triangles", data_params=TRI, epochs=2, seeds=(0, 1),
                              device="cpu", test_batch_size=64))
    for cfg in (tiny(supervision="sup"), tri):
        stack, splits = _trained(cfg, seeds=(0, 1))
        batches = eval_batches(splits["test_orig"], cfg.test_batch_size, CPU)
        whole = batched.evaluate_members(stack, [0, 1], batches, cfg).records
        monkeypatch.setattr(batched, "CPU_EVAL_ENTRIES", 1)
        monkeypatch.setattr(batched, "CPU_EVAL_GRAPHS", 3)  # 3 graphs per forward
        sliced = batched.evaluate_members(stack, [0, 1], batches, cfg).records
        monkeypatch.undo()
        for a, b in zip(sliced, whole):  # exactly equal (NaN where NaN)
            assert a.keys() == b.keys()
            assert all(a[k] == b[k] or (a[k] != a[k] and b[k] != b[k]) for k in a), (a, b)


def test_attention_auc_pack_matches_metrics_with_ties_and_one_class_rows():
    g = torch.Generator().manual_seed(0)
    alpha = torch.randint(0, 5, (4, 50), generator=g).float() / 4  # many ties
    pos = torch.rand(4, 50, generator=g) < 0.3
    valid = torch.rand(4, 50, generator=g) < 0.8
    pos[2] = True  # every node positive: NaN
    valid[3] = False  # nothing scored: NaN
    got = attention_auc_pack(alpha, pos, valid).tolist()
    for s in range(4):
        m = valid[s]
        want = metrics.attention_auc(alpha[s][m], pos[s][m].float())
        assert (math.isnan(want) and math.isnan(got[s])) or abs(got[s] - want) < 1e-12


def _syncs(fn, *args, **kw) -> int:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn(*args, **kw)
    return sum(1 for e in prof.events() if e.name in SYNCS)


def test_the_profiler_sees_host_syncs():
    t = torch.arange(6.0)
    assert _syncs(lambda: (t.sum().item(), t[t > 2], bool(t.any()))) >= 3


@pytest.mark.parametrize("kw", [
    dict(supervision="sup"),
    dict(supervision="unsup", selection="topk", ratio=0.3),
    dict(dataset="triangles", data_params=TRI, supervision="sup"),
])
def test_evaluation_syncs_with_the_host_a_constant_number_of_times(kw):
    """Host synchronisations of one evaluation do not grow with batches or members."""
    cfg = tiny(epochs=1, seeds=(0, 1, 2, 3), **kw)
    stack, splits = _trained(cfg)
    few, many = (eval_batches(splits["test_orig"], bs, CPU) for bs in (20, 6))
    assert len(many) >= 3 * len(few)
    counts = {"few batches, 2 members": _syncs(batched.evaluate_members, stack, [0, 1], few, cfg),
              "many batches, 4 members": _syncs(batched.evaluate_members, stack, [0, 1, 2, 3],
                                                many, cfg),
              "curve": _syncs(batched.evaluate_members, stack, [0, 1, 2, 3], many, cfg,
                              fields="curve")}
    assert max(counts.values()) <= 2, counts
    # the pooled AUC of a pack: one more transfer
    res = {s: batched.evaluate_members(stack, [0, 1, 2, 3], eval_batches(splits[s], 6, CPU), cfg)
           for s in ("test_orig", "test_large")}
    assert _syncs(pool_test_auc_pack, res, cfg.dataset) <= 2


@pytest.mark.parametrize("kw", [
    dict(supervision="sup"),
    dict(dataset="triangles", data_params=TRI, supervision="sup"),
])
def test_evaluation_creates_no_tensor_on_the_default_device(kw):
    """Under the `meta` default device a tensor made without `device=` would not mix with the
    pack's CPU tensors: the evaluation and the pooled AUC run, with the same numbers."""
    cfg = tiny(epochs=1, seeds=(0, 1), **kw)
    stack, splits = _trained(cfg)
    batches = {s: eval_batches(splits[s], 8, CPU) for s in ("test_orig", "test_large")}

    def run():
        res = {s: batched.evaluate_members(stack, [0, 1], b, cfg) for s, b in batches.items()}
        return [r.records for r in res.values()], pool_test_auc_pack(res, cfg.dataset)

    want = run()
    with torch.device("meta"):
        got = run()
    assert got == want
