"""Counter-based dropout (ablate/models/dropout.py): pure masks, identical packed and seed by seed."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from _packs import CPU, TIMING, TINY, close, tmp_cache  # noqa: F401 (tmp_cache: autouse fixture)
from torch.func import vmap

from ablate.config import TrialConfig, resolve, trial_id
from ablate.data import dataset_recipe_hash, load_graphsets
from ablate.models.dropout import CounterDropout, counter_dropout, dropout_key, keep_mask, uniform
from ablate.models.layers import Graph
from ablate.models.network import GraphNet
from ablate.trial import pack_step
from ablate.trial import packed as batched
from ablate.trial.batches import TrainBatches
from ablate.trial.fit import fit
from ablate.trial.graph import run_seed, run_trial_full
from ablate.trial.setup import seeded_model


def tiny(**kw) -> TrialConfig:
    base = dict(dataset="colors", data_params=TINY, epochs=3, seeds=(0, 1, 2), dropout=0.5,
                supervision="sup", device="cpu", eval_every=1)
    return TrialConfig(**{**base, **kw})


# ------------------------------------------------------------------------------ the mask


def test_the_mask_is_a_pure_function_of_seed_step_layer_and_element():
    shape = (32, 64)
    m = keep_mask(shape, 0.5, 3, 7, 0)
    assert m.shape == shape and m.dtype == torch.bool
    assert torch.equal(m, keep_mask(shape, 0.5, 3, 7, 0))  # repeated call
    assert torch.equal(m, keep_mask(shape, 0.5, torch.tensor(3), torch.tensor(7), 0))  # tensors
    for other in [(4, 7, 0), (3, 8, 0), (3, 7, 1), (3 + 2 ** 32, 7, 0)]:  # all 64 seed bits count
        assert not torch.equal(m, keep_mask(shape, 0.5, *other))
    # element i's value depends on its flat index only: a smaller batch is a prefix
    assert torch.equal(keep_mask((5, 64), 0.5, 3, 7, 0), m[:5])
    # a higher p drops a superset (same u, larger threshold)
    assert not (keep_mask(shape, 0.7, 3, 7, 0) & ~m).any()


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_keep_rate_is_one_minus_p_and_u_is_uniform(p):
    n = 200_000
    rates = [keep_mask((n,), p, s, t, 0).float().mean().item() for s, t in [(0, 0), (1, 5), (9, 2)]]
    sd = math.sqrt(p * (1 - p) / n)
    assert all(abs(r - (1 - p)) < 6 * sd for r in rates), rates
    u = uniform((n,), dropout_key(0, 0, 0))
    assert 0 <= u.min() and u.max() < 1
    hist = torch.histc(u, bins=10, min=0, max=1) / n
    assert (hist - 0.1).abs().max() < 0.01
    # masks of consecutive steps agree on about (1-p)^2 + p^2 of the elements: independent
    a, b = keep_mask((n,), p, 0, 0, 0), keep_mask((n,), p, 0, 1, 0)
    assert abs((a == b).float().mean().item() - ((1 - p) ** 2 + p ** 2)) < 0.01


def test_scaled_in_training_identity_in_eval():
    x = torch.randn(16, 32, dtype=torch.float64)
    y = counter_dropout(x, 0.25, 1, 2, 3)
    keep = keep_mask(x.shape, 0.25, 1, 2, 3)
    torch.testing.assert_close(y, torch.where(keep, x / 0.75, torch.zeros_like(x)))
    assert counter_dropout(x, 0.25, 1, 2, 3, training=False) is x
    d = CounterDropout(0.25, layer=3)
    assert isinstance(d, torch.nn.Dropout)
    torch.testing.assert_close(d(x, torch.tensor(1), torch.tensor(2)), y)
    assert d.eval()(x, 1, 2) is x


def test_vmap_with_per_member_seeds_equals_each_member_alone():
    seeds = torch.tensor([0, 1, 7919, 2 ** 40 + 3])
    step = torch.tensor(11)  # shared by every member
    x = torch.randn(4, 8, 16)
    got = vmap(lambda s, xi: counter_dropout(xi, 0.5, s, step, 2))(seeds, x)
    for i, s in enumerate(seeds.tolist()):
        assert torch.equal(got[i], counter_dropout(x[i], 0.5, s, 11, 2))
    shared_x = x[0]
    got = vmap(lambda s: counter_dropout(shared_x, 0.5, s, step, 2))(seeds)
    for i, s in enumerate(seeds.tolist()):
        assert torch.equal(got[i], counter_dropout(shared_x, 0.5, s, 11, 2))


def test_graphnet_dropout_is_keyed_by_the_forward_and_off_in_eval():
    cfg = resolve(TrialConfig(dataset="digits_sp", backbone="gin"))
    assert cfg.dropout == 0.5
    torch.manual_seed(0)
    net = GraphNet(cfg, 5, 10).train()
    x, A = torch.randn(6, 9, 5), torch.ones(6, 9, 9)
    g = Graph(A, torch.ones(6, 9, dtype=torch.bool))

    def out(seed, step):
        return net(x, g, hyper={"dropout_seed": torch.tensor(seed), "step": torch.tensor(step)}).out

    assert torch.equal(out(1, 2), out(1, 2))
    assert not torch.equal(out(1, 2), out(1, 3)) and not torch.equal(out(1, 2), out(2, 2))
    net.eval()
    assert torch.equal(out(1, 2), out(2, 3))
    assert torch.equal(out(1, 2), net(x, g).out)


# ---------------------------------------------------------------- packed vs seed by seed




def _by_seed(res, seed):
    return ({r["split"]: r for r in res.records if r["seed"] == seed},
            [c for c in res.curves if c["seed"] == seed])


def _assert_same(got, ref, seed, skip=()):
    (ga, gc), (ra, rc) = _by_seed(got, seed), _by_seed(ref, seed)
    assert ra and set(ga) == set(ra)
    for split, b in ra.items():
        a = ga[split]
        bad = {k: (a[k], b[k]) for k in b if k not in TIMING | {"acc_by_size", "gt_mass_curve", *skip}
               and not close(a[k], b[k], k)}
        assert not bad, (seed, split, bad)
    assert len(gc) == len(rc) > 0
    for a, b in zip(gc, rc):
        assert all(close(a[k], b[k], k) for k in b), (a, b)


def _sequential(cfg: TrialConfig) -> SimpleNamespace:
    r = resolve(cfg)
    splits = load_graphsets(r.dataset, **r.data_kwargs)
    res = [run_seed(r, splits, s, CPU) for s in r.seeds]
    return SimpleNamespace(records=[x for t in res for x in t.records],
                           curves=[x for t in res for x in t.curves])


@pytest.mark.parametrize("step", ["eager", "replay"])
def test_a_dropout_pack_equals_each_seed_alone(step):
    cfg = tiny(step=step)
    assert batched.eligible(resolve(cfg))
    pack = run_trial_full(cfg)
    assert all(r["batched_seeds"] == 3 for r in pack.records)
    seq = _sequential(cfg)
    for seed in cfg.seeds:
        _assert_same(pack, seq, seed, skip={"batched_seeds"})
    # dropout changed the training: the same seeds without it give other losses
    plain = run_trial_full(cfg.replace(dropout=0.0))
    assert [c["train_loss"] for c in plain.curves] != [c["train_loss"] for c in pack.curves]


def test_weak_supervision_with_dropout_packs_model_b_with_its_own_seed():
    """Model B of seed s draws the masks of seed s + MODEL_B_SEED in both paths."""
    cfg = tiny(supervision="weak", seeds=(0, 1), epochs=2)
    pack = run_trial_full(cfg)
    assert {r["batched_seeds"] for r in pack.records} == {2}
    seq = _sequential(cfg)
    for seed in cfg.seeds:
        _assert_same(pack, seq, seed, skip={"batched_seeds"})


def test_a_members_numbers_do_not_depend_on_its_pack():
    three = run_trial_full(tiny(seeds=(0, 1, 2)))
    two = run_trial_full(tiny(seeds=(1, 2)))
    assert {r["batched_seeds"] for r in two.records} == {2}
    for seed in (1, 2):
        _assert_same(two, three, seed, skip={"batched_seeds", "seeds"})


# ----------------------------------------------------------------------- no host RNG


def test_training_with_dropout_draws_nothing_from_torchs_global_rng():
    cfg = resolve(tiny(epochs=2))
    splits = load_graphsets(cfg.dataset, **cfg.data_kwargs)
    train = TrainBatches(splits["train"], CPU)
    in_ch = splits["train"].num_features
    with torch.random.fork_rng():
        for replay in (False, True):  # the eager and the fixed-shape (capturable) step
            stack = batched.MemberStack([batched.Member(cfg, s) for s in cfg.seeds], in_ch, 1, CPU)
            before = stack.params["head.weight"].clone()
            torch.manual_seed(1234)
            state = torch.get_rng_state()
            failed, _ = batched.fit_members(stack, train, cfg, CPU, replay)
            assert not failed
            assert torch.equal(torch.get_rng_state(), state), replay
            assert not torch.equal(stack.params["head.weight"], before)
        model = seeded_model(cfg, 0, in_ch, 1, CPU)
        torch.manual_seed(1234)
        state = torch.get_rng_state()
        fit(model, cfg, train, 0)
        assert torch.equal(torch.get_rng_state(), state)


def _pack_step(cfg: TrialConfig):
    splits = load_graphsets(cfg.dataset, **cfg.data_kwargs)
    train = TrainBatches(splits["train"], CPU)
    stack = batched.MemberStack([batched.Member(cfg, s) for s in cfg.seeds],
                                splits["train"].num_features, 1, CPU)
    return train, stack


def test_the_packed_step_advances_a_device_counter_in_place():
    """What a replayed CUDA graph needs: the step reads its key from device tensors that
    `_body` updates in place (one increment per optimisation step, never re-created), and
    names their device (under a `meta` default device a tensor that does not would fail)."""
    cfg = resolve(tiny(epochs=1, batch_size=24))
    train, stack = _pack_step(cfg)
    perm = torch.stack([torch.randperm(len(train), generator=torch.Generator().manual_seed(s))
                        for s in cfg.seeds])
    with torch.device("meta"):
        ps = pack_step.PackStep(stack, train, cfg, CPU, replay=True)
        ptr = ps.step.data_ptr()
        n = 0
        for s in range(0, len(train), cfg.batch_size):
            ps.run(perm[:, s:s + cfg.batch_size])
            n += 1
    assert ps.dropout_seed.tolist() == list(cfg.seeds)
    assert int(ps.step) == n == 3 and ps.step.data_ptr() == ptr
    assert torch.isfinite(ps.total).all()


def test_a_traced_loss_reads_the_step_from_its_tensor():
    """The vmapped loss traced once (`make_fx`, what a capture records: no `.item()`, no host
    RNG, no data-dependent shape) and run at other steps gives the eager loss of each step."""
    from torch.fx.experimental.proxy_tensor import make_fx

    cfg = resolve(tiny(epochs=1))
    train, stack = _pack_step(cfg)
    ps = pack_step.PackStep(stack, train, cfg, CPU, replay=True)
    b = pack_step._gather(train, torch.arange(48).reshape(3, 16), True)

    def args(step: int):
        return (ps.train_p, ps.fixed_p, stack.hyper, ps.dropout_seed, torch.tensor(step),
                b.x, b.A, b.mask, b.gt, b.y)

    with torch.no_grad():
        traced = make_fx(ps._loss)(*args(0))
        losses = [ps._loss(*args(t)) for t in (0, 1, 7)]
        for t, eager in zip((0, 1, 7), losses):
            assert torch.equal(traced(*args(t)), eager)
    assert not torch.equal(losses[0], losses[1])  # the step changes the masks


# --------------------------------------------------------------------------- trial ids


def _id(**kw) -> str:
    kw.setdefault("lr_timing", "early")  # the LR timing of then (`CHANGED_DEFAULTS`, issue 41)
    c = resolve(TrialConfig(**kw))
    return trial_id(c, dataset_recipe_hash(c.dataset, dict(c.data_params)))


def test_only_dropout_trial_ids_change():
    # without dropout: the ids computed before counter-based dropout (a78d346)
    assert _id() == "702c6fc188b1"
    assert _id(dataset="triangles") == "aa008146ba3c"
    assert _id(dataset="digits_sp", backbone="gin", dropout=0.0) == _id(
        dataset="digits_sp", backbone="gin", dropout=0.0)
    # with dropout (MNIST-75SP recipe 0.5): the masks are drawn differently, a new id; on the
    # digits as they were before issue 26 (slic=v0.19, noise=nodes), it is kept
    before26 = {"slic": "v0.19", "noise": "nodes"}
    old = "1c8ba857b6e4"  # was 2fd2219b3fea
    assert _id(dataset="digits_sp", backbone="gin", data_params=before26) == old
    assert _id(dataset="digits_sp", backbone="gin") != old  # issue 26: new data


# ------------------------------------------------------------------------------- CUDA

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@needs_cuda
def test_cuda_masks_equal_cpu_masks_and_a_captured_pack_matches_the_cpu():
    cuda = torch.device("cuda")
    for p in (0.1, 0.5):
        got = keep_mask((64, 512), p, torch.tensor(5, device=cuda), torch.tensor(9, device=cuda), 0)
        assert torch.equal(got.cpu(), keep_mask((64, 512), p, 5, 9, 0))
    cfg = tiny()
    gpu = run_trial_full(cfg.replace(device="cuda", step="replay"))
    cpu = run_trial_full(cfg.replace(step="eager"))
    key = lambda r: (r["seed"], r["split"])  # noqa: E731
    for a, b in zip(sorted(gpu.records, key=key), sorted(cpu.records, key=key)):
        assert a["status"] == b["status"] == "ok"
        assert abs(a["loss"] - b["loss"]) <= 1e-2 * max(1.0, abs(b["loss"]))


def test_masks_are_independent_across_steps_rows_and_neighbouring_elements():
    """The masks a (32, 512) readout gets over 200 steps: half kept, and no correlation between
    consecutive steps, rows or neighbouring elements (a hash that leaked structure would
    regularise differently from the reference's Bernoulli draws)."""
    m = torch.stack([keep_mask((32, 512), 0.5, 7, s, 0) for s in range(200)]).float()
    assert abs(m.mean().item() - 0.5) < 0.005

    def corr(a, b):
        return torch.corrcoef(torch.stack([a.flatten(), b.flatten()]))[0, 1].abs().item()

    assert corr(m[:-1], m[1:]) < 0.01  # step to step
    assert corr(m[:, :-1], m[:, 1:]) < 0.01  # row to row
    assert corr(m[:, :, :-1], m[:, :, 1:]) < 0.01  # element to element
