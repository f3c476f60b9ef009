"""Seeds trained as one vmapped model (ablate/trial/packed.py) match seeds trained one by one."""

import math
from types import SimpleNamespace

import pytest
import torch
from _packs import ATOL, TIMING, TINY, TRI, close, noise_only, tmp_cache  # noqa: F401 (tmp_cache: autouse fixture)

from ablate.config import TrialConfig, resolve
from ablate.data import load_graphsets
from ablate.trial import pack_step
from ablate.trial import packed as batched
from ablate.trial.fit import lr_at
from ablate.trial.graph import run_seed, run_trial_full


def tiny(**kw) -> TrialConfig:
    base = dict(dataset="colors", data_params=TINY, epochs=4, seeds=(0, 1, 2), eval_every=2,
                device="cpu")
    return TrialConfig(**{**base, **kw})




def _sequential(cfg: TrialConfig):
    cfg = resolve(cfg)
    splits = load_graphsets(cfg.dataset, **cfg.data_kwargs)
    return [run_seed(cfg, splits, s, torch.device("cpu")) for s in cfg.seeds]


def _assert_matches(res, seq, seeds):
    for seed, ref in zip(seeds, seq):
        got = {r["split"]: r for r in res.records if r["seed"] == seed}  # split order may differ
        assert len(got) == len(ref.records)
        for b in ref.records:
            a = got[b["split"]]
            assert a["batched_seeds"] == len(seeds)
            bad = {k: (a[k], b[k]) for k in b if k not in TIMING | {"acc_by_size", "gt_mass_curve"}
                   and not close(a[k], b[k], k)}
            assert not bad, (seed, a["split"], bad)
        curves = [c for c in res.curves if c["seed"] == seed]
        assert len(curves) == len(ref.curves)
        for a, b in zip(curves, ref.curves):
            assert all(close(a[k], b[k], k) for k in b), (a, b)


@pytest.mark.parametrize("kw", [
    dict(supervision="unsup"),
    dict(supervision="sup"),
    dict(supervision="sup", selection="topk", ratio=0.3),
    dict(dataset="triangles", data_params=TRI, epochs=2, seeds=(0, 1), supervision="sup"),
])
def test_batched_equals_sequential(kw):
    cfg = tiny(**kw)
    r = resolve(cfg)
    assert batched.eligible(r)
    if cfg.dataset == "triangles":
        assert r.scorer == "gnn" and len(r.pool_layers) == 2
    _assert_matches(run_trial_full(cfg), _sequential(cfg), r.seeds)


@pytest.mark.parametrize("step", ["eager", "replay"])
def test_nan_in_one_seed_marks_only_that_seed(monkeypatch, step):
    """Eager, or replayed (fixed shapes, the step a CUDA graph captures): only the member that
    goes NaN is marked `nan`; the others train as they would alone."""
    init = batched.MemberStack.__init__

    def poisoned(self, *a, **kw):
        init(self, *a, **kw)
        for v in self.params.values():
            v[1].fill_(math.nan)  # seed index 1 starts from NaN parameters

    monkeypatch.setattr(batched.MemberStack, "__init__", poisoned)
    cfg = tiny(supervision="sup", step=step)
    res = run_trial_full(cfg)
    status = {(r["seed"], r["split"]): r["status"] for r in res.records}
    assert {k: v for k, v in status.items() if k[0] == 1} == {
        (1, s): "nan" for s in ("val", "test_orig", "test_large", "test_largec")}
    assert all(v == "ok" for k, v in status.items() if k[0] != 1)
    assert not [c for c in res.curves if c["seed"] == 1]
    seq = _sequential(cfg.replace(seeds=(0, 2)))  # the other seeds are unaffected
    for seed, ref in zip((0, 2), seq):
        got = {r["split"]: r for r in res.records if r["seed"] == seed}
        for b in ref.records:
            a = got[b["split"]]
            assert a["accuracy"] == b["accuracy"] and close(a["loss"], b["loss"], "loss")


def test_batched_runs_are_deterministic():
    cfg = tiny(supervision="sup", epochs=2)
    a, b = run_trial_full(cfg), run_trial_full(cfg)
    strip = [{k: v for k, v in r.items() if k not in TIMING} for r in a.records]
    assert strip == [{k: v for k, v in r.items() if k not in TIMING} for r in b.records]
    assert a.curves == b.curves


def test_ineligible_configs_stay_sequential():
    assert not batched.eligible(resolve(tiny(selection="gao")))
    assert batched.eligible(resolve(tiny(dataset="digits_sp", data_params=())))  # dropout packs
    recs = run_trial_full(tiny(seeds=(0,), epochs=1)).records  # one seed on a CPU
    assert all(r["batched_seeds"] == 1 for r in recs)


# --------------------------------------------------------------------- fixed shapes and packs


@pytest.mark.parametrize("kw", [
    dict(supervision="sup"),
    dict(supervision="unsup", selection="topk", ratio=0.4),
    dict(dataset="triangles", data_params=TRI, epochs=2, seeds=(0, 1), supervision="sup"),
])
def test_fixed_shape_step_equals_eager(kw):
    """step=replay (batches padded to the split's largest graph, device-side loss sums,
    in-place LR) trains the same parameters as the eager step, to float tolerance."""
    from ablate.trial.batches import TrainBatches

    cfg = resolve(tiny(batch_size=24, **kw))
    splits = load_graphsets(cfg.dataset, **cfg.data_kwargs)
    train = TrainBatches(splits["train"], torch.device("cpu"))
    assert len(train) % cfg.batch_size != 0  # the last, smaller batch is exercised
    members = [batched.Member(cfg, s) for s in cfg.seeds]
    params = []
    for replay in (False, True):
        stack = batched.MemberStack(members, splits["train"].num_features, 1, torch.device("cpu"))
        failed, _ = batched.fit_members(stack, train, cfg, torch.device("cpu"), replay)
        assert not failed
        params.append(stack.params)
    skip = noise_only(cfg, splits)  # the GNN scorer's last bias: rounding noise only
    for k in params[0]:
        if k not in skip:
            torch.testing.assert_close(params[1][k], params[0][k], rtol=1e-4, atol=ATOL)
    eager = run_trial_full(cfg.replace(step="eager"))
    for r in eager.records:
        r["step"] = "replay"  # the one column that differs
    _assert_matches(run_trial_full(cfg.replace(step="replay")), [
        SimpleNamespace(records=[r for r in eager.records if r["seed"] == s],
                        curves=[c for c in eager.curves if c["seed"] == s]) for s in cfg.seeds],
        cfg.seeds)


def test_early_lr_timing_decays_at_the_listed_epoch_like_todays_scheduler():
    """lr_timing=early: the authors' loop under today's torch (MultiStepLR stepped at the start
    of each epoch): epoch m already decays."""
    from ablate.trial.fit import lr_at

    cfg = resolve(tiny(epochs=12, lr_decay_epochs=(4, 9), lr_timing="early"))
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=cfg.lr)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, list(cfg.lr_decay_epochs), gamma=0.1)
    for epoch in range(1, cfg.epochs + 1):
        opt.step()
        sched.step()  # at the start of `epoch`, as the reference's loop does
        assert lr_at(cfg, epoch) == pytest.approx(opt.param_groups[0]["lr"], rel=1e-12)
    assert [round(lr_at(cfg, e) / cfg.lr, 6) for e in (3, 4, 8, 9)] == [1.0, 0.1, 0.1, 0.01]


def test_pack_key_groups_only_stackable_differences():
    a = resolve(tiny(supervision="sup"))
    same = [a.replace(threshold=0.1), a.replace(kl_weight=3.0), a.replace(ratio=0.2),
            a.replace(init_dist="uniform", init_scale=0.1), a.replace(seeds=(7,))]
    assert {batched.pack_key(c) for c in same} == {batched.pack_key(a)}
    other = [a.replace(supervision="unsup"), a.replace(backbone="gin", K=1),
             a.replace(epochs=5), a.replace(pool_layers=(2,)), a.replace(normalizer="sparsemax")]
    assert batched.pack_key(a) not in {batched.pack_key(c) for c in other}


def test_pack_of_configurations_equals_separate_trials():
    """Trials differing in threshold, kl_weight and init of p, trained as one pack, give
    each trial's own records (same seeds, shuffling, init, hyperparameters)."""
    from ablate.trial.graph import run_pack_full

    cfgs = [tiny(supervision="sup", seeds=(0, 1)),
            tiny(supervision="sup", seeds=(2,), threshold=0.1, kl_weight=10.0),
            tiny(supervision="sup", seeds=(3, 4), init_dist="uniform", init_scale=0.1,
                 threshold=0.02)]
    packed = run_pack_full(cfgs)
    assert all(r["batched_seeds"] == 5 for res in packed for r in res.records)
    for cfg, res in zip(cfgs, packed):
        r = resolve(cfg)
        assert all(rec["threshold"] == r.threshold and rec["kl_weight"] == r.kl_weight
                   for rec in res.records)
        _assert_batched_close(res, _sequential(cfg), r.seeds)


def _assert_batched_close(res, seq, seeds, graphs: int = 0):
    """Records equal (`close`); with `graphs` > 0, accuracies may differ by that many graphs
    of the split (two paths that pad differently can put a node at the threshold on either
    side of it), and the metrics that follow from kept nodes by 1e-2."""
    for seed, ref in zip(seeds, seq):
        got = {r["split"]: r for r in res.records if r["seed"] == seed}
        for b in ref.records:
            a = got[b["split"]]
            bad = {k: (a[k], b[k]) for k in b if k not in TIMING | {"acc_by_size", "gt_mass_curve",
                                                                    "batched_seeds", "step"}
                   and not close(a[k], b[k], k)}
            if graphs:
                n = max(1, int(b.get("n_graphs") or 1))
                bad = {k: v for k, v in bad.items() if not (
                    isinstance(v[1], float) and abs(v[0] - v[1]) <= (
                        graphs / n if "accuracy" in k else 1e-2 * max(1.0, abs(v[1]))))}
            assert not bad, (seed, a["split"], bad)


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@needs_cuda
@pytest.mark.parametrize("kw", [dict(supervision="sup"), dict(pool_layers=()),
                                dict(supervision="unsup", selection="topk"),
                                dict(dataset="triangles", data_params=TRI, epochs=2,
                                     seeds=(0, 1), supervision="sup")])
def test_cuda_replay_agrees_with_cpu(kw):
    """The replayed CUDA-graph step and CPU training give the same science (float noise)."""
    cfg = tiny(**kw)
    gpu = run_trial_full(cfg.replace(device="cuda", step="replay"))
    cpu = run_trial_full(cfg.replace(device="cpu", step="eager"))
    assert all(r["device"].startswith("cuda") for r in gpu.records)
    for a, b in zip(sorted(gpu.records, key=_key), sorted(cpu.records, key=_key)):
        assert a["status"] == b["status"] == "ok"
        assert abs(a["accuracy"] - b["accuracy"]) <= 0.05, (a["split"], a["accuracy"],
                                                             b["accuracy"])
        assert abs(a["loss"] - b["loss"]) <= 1e-2 * max(1.0, abs(b["loss"]))


@needs_cuda
def test_cuda_replay_equals_cuda_eager():
    cfg = tiny(supervision="sup", device="cuda")
    _assert_batched_close(run_trial_full(cfg.replace(step="replay")),
                          _split_by_seed(run_trial_full(cfg.replace(step="eager")), cfg.seeds),
                          cfg.seeds, graphs=2)


@needs_cuda
@pytest.mark.parametrize("kw", [dict(seeds=(0,), supervision="weak"), dict(selection="gao"),
                                dict(pool_layers=(), seeds=(0,))])
def test_cuda_sequential_paths_run(kw):
    recs = run_trial_full(tiny(device="cuda", epochs=1, **kw)).records
    assert recs and all(r["status"] == "ok" and r["device"].startswith("cuda") for r in recs)


def _key(r):
    return (r["seed"], r["split"])


def _split_by_seed(res, seeds):
    return [SimpleNamespace(records=[r for r in res.records if r["seed"] == s],
                            curves=[c for c in res.curves if c["seed"] == s]) for s in seeds]


def test_replay_orchestration_with_a_stand_in_graph():
    """The capture / warm-up / replay bookkeeping of `PackStep`, run on the CPU with a stand-in
    for a CUDA graph that re-runs the recorded step on each replay (as a replay assigns fresh
    gradients, the stand-in clears them first): same parameters as the plain step, one capture
    per batch shape, the static index buffer refilled every step."""
    from ablate.trial.batches import TrainBatches

    cfg = resolve(tiny(batch_size=24, supervision="sup", epochs=3))
    splits = load_graphsets(cfg.dataset, **cfg.data_kwargs)
    cpu = torch.device("cpu")
    train = TrainBatches(splits["train"], cpu)
    members = [batched.Member(cfg, s) for s in cfg.seeds]
    captures, replays = [], []

    def run(graphs: bool):
        stack = batched.MemberStack(members, splits["train"].num_features, 1, cpu)
        ps = batched.PackStep(stack, train, cfg, cpu, replay=True)
        if graphs:
            ps.graphs_on = True
            ps._warm = lambda step: (ps.opt.zero_grad(set_to_none=True), step())

            def capture(step):
                captures.append(1)

                def replay():
                    replays.append(1)
                    ps.opt.zero_grad(set_to_none=True)
                    step()
                return replay
            ps._capture = capture
        gens = [torch.Generator().manual_seed(m.seed) for m in members]
        for epoch in range(1, cfg.epochs + 1):
            ps.set_lr(lr_at(cfg, epoch))
            perms = torch.stack([torch.randperm(len(train), generator=g) for g in gens])
            for s in range(0, len(train), cfg.batch_size):
                ps.run(perms[:, s:s + cfg.batch_size])
        return stack.params

    plain, graphed = run(False), run(True)
    for k in plain:
        torch.testing.assert_close(graphed[k], plain[k], rtol=1e-5, atol=1e-6)
    steps = cfg.epochs * -(-len(train) // cfg.batch_size)  # 3 epochs x (2 full + 1 partial)
    assert len(captures) == 2  # one graph per batch shape (full, last partial)
    assert len(replays) == steps - 2 * pack_step.WARMUP_STEPS


def test_a_pack_that_runs_out_of_memory_is_split_in_halves(monkeypatch):
    real = batched._run_members
    sizes = []

    def small_device(members, splits, device):
        sizes.append(len(members))
        if len(members) > 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(members, splits, device)

    monkeypatch.setattr(batched, "_run_members", small_device)
    cfg = resolve(tiny(supervision="sup", epochs=1, seeds=(0, 1, 2, 3, 4)))
    splits = load_graphsets(cfg.dataset, **cfg.data_kwargs)
    out = batched.run_seeds_batched(cfg, splits, torch.device("cpu"))
    assert sizes == [5, 2, 3, 1, 2]  # 5 -> 2 + 3 -> 3 -> 1 + 2
    assert [o[0][0]["seed"] for o in out] == [0, 1, 2, 3, 4]  # every member, in order


def test_a_pack_frees_its_training_split_before_the_test_splits_and_trims_after_model_b(
        monkeypatch):
    """As `run_seed` does: the collated training split is not alive while the test splits are
    evaluated, and after the pack's model B (weak supervision) the heap's free pages go back."""
    import gc
    import weakref

    made, trims, seen = [], [], []

    class Tracked(batched.TrainBatches):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            made.append(weakref.ref(self))

    real_eval = batched.evaluate_members

    def evaluate_members(stack, alive, batches, cfg, fields="all", **kw):
        if fields != "curve":  # a split's evaluation after training, not a validation curve
            gc.collect()
            seen.append([r() is not None for r in made])
        return real_eval(stack, alive, batches, cfg, fields=fields, **kw)

    monkeypatch.setattr(batched, "TrainBatches", Tracked)
    monkeypatch.setattr(batched, "evaluate_members", evaluate_members)
    monkeypatch.setattr(batched, "release_free_heap", lambda: trims.append(len(made)))
    cfg = resolve(tiny(seeds=(0, 1), epochs=2, supervision="weak"))
    splits = load_graphsets(cfg.dataset, **cfg.data_kwargs)
    out = batched.run_seeds_batched(cfg, splits, torch.device("cpu"))
    assert all(isinstance(o, tuple) for o in out)
    assert seen and made and not any(any(s) for s in seen), seen
    assert trims == [1]  # once, after model B, before the members' own model is made
