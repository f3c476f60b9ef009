"""Leave-one-node-out for all members of a pack (ablate/trial/pack_loo.py) = member by member."""

from unittest import mock

import numpy as np
import pytest
import torch
from _packs import CPU, TINY, tmp_cache  # noqa: F401 (tmp_cache: autouse fixture)

from ablate.config import TrialConfig, resolve
from ablate.data import load_graphsets
from ablate.trial import local_loo
from ablate.trial.batches import eval_batches
from ablate.trial.local_loo import loo_outputs_members, supports_local_loo
from ablate.trial.members import Member, MemberStack
from ablate.trial.pack_loo import leave_one_out_attention_members, leave_one_out_members
from ablate.trial.weak import leave_one_out_attention, leave_one_out_batch

ALIVE = [3, 0, 2]  # a strict subset, out of order


def splits():
    cfg = resolve(TrialConfig(dataset="colors", data_params=TINY))
    return load_graphsets(cfg.dataset, **cfg.data_kwargs)


def stack_of(out_ch: int = 1, seeds=(0, 1, 2, 3), **kw) -> MemberStack:
    """Members of one COLORS global-pool config (resolved), their parameters perturbed apart."""
    cfg = resolve(TrialConfig(dataset="colors", data_params=TINY, pool_layers=(), **kw))
    in_ch = splits()["train"].num_features
    stack = MemberStack([Member(cfg, s) for s in seeds], in_ch, out_ch, CPU)
    g = torch.Generator().manual_seed(123)
    for v in stack.params.values():  # different noise per member
        v.add_(0.3 * float(v.std()) * torch.randn(v.shape, generator=g))
    return stack


def batches(split: str = "test_large", batch_size: int = 16):
    return eval_batches(splits()[split], batch_size, CPU)


def assert_members_equal(stack: MemberStack, target: str, split: str = "test_large") -> None:
    """Every batch: the pack = member by member, with the CPU's member chunks (default) and
    with every member at once (CUDA's budget)."""
    for _, b in batches(split):
        with torch.no_grad():
            ref = torch.stack([leave_one_out_batch(stack.materialise(i), b, target=target)
                               for i in ALIVE])
        scale = ref.flatten(1).abs().amax(1) + 1e-3  # per member
        assert (ref.flatten(1).amax(1) > 0).all()  # members really differ from zero
        for member_entries in (None, 10 ** 12):
            got = leave_one_out_members(stack, ALIVE, b, target, member_entries=member_entries)
            assert got.shape == (len(ALIVE), *b.mask.shape)
            err = (got - ref).flatten(1).abs().amax(1)
            assert (err <= 1e-5 * scale + 1e-6).all(), (member_entries, err, scale)
            assert (got[:, ~b.mask] == 0).all()
    assert not torch.allclose(got[0], got[1])  # and from each other


@pytest.mark.parametrize("target", ["logit", "prob"])
@pytest.mark.parametrize("out_ch", [1, 3])
def test_local_path_colors(out_ch, target):
    """COLORS' global-pool model (K = 2, sum aggregation and readout): the incremental path."""
    if out_ch == 1 and target == "prob":
        pytest.skip("regression has no probability")
    stack = stack_of(out_ch)
    cfg = stack.members[0].cfg
    assert (cfg.K, cfg.readout) == (2, "sum") and supports_local_loo(stack.base)
    assert_members_equal(stack, target)


@pytest.mark.parametrize("kw,out_ch", [(dict(backbone="gcn"), 1),
                                       (dict(backbone="gcn", readout="mean"), 3),
                                       (dict(backbone="gin", filters=(16, 16, 16)), 3)])
def test_local_path_k1(kw, out_ch):
    """GCN / GIN (K = 1), mean and sum readout, three layers (an outer shell per layer)."""
    stack = stack_of(out_ch, **kw)
    assert stack.members[0].cfg.K == 1 and supports_local_loo(stack.base)
    assert_members_equal(stack, "prob" if out_ch > 1 else "logit")


@pytest.mark.parametrize("target", ["logit", "prob"])
@pytest.mark.parametrize("kw,out_ch", [(dict(K=3, filters=(16, 16)), 1),
                                       (dict(readout="max", filters=(16, 16)), 3),
                                       (dict(K=3, filters=(16, 16)), 3)])
def test_dense_path(kw, out_ch, target):
    if out_ch == 1 and target == "prob":
        pytest.skip("regression has no probability")
    stack = stack_of(out_ch, **kw)
    assert not supports_local_loo(stack.base)
    assert_members_equal(stack, target)


def test_dense_chunks_give_the_same_values():
    """Chunks of one member and one graph = one chunk of everything."""
    stack = stack_of(3, K=3, filters=(16, 16))
    _, b = batches()[-1]
    one = leave_one_out_members(stack, ALIVE, b, "prob", chunk_entries=10 ** 12,
                                member_entries=10 ** 12)
    with mock.patch("ablate.trial.pack_loo.functional_call",
                    wraps=torch.func.functional_call) as spy:
        many = leave_one_out_members(stack, ALIVE, b, "prob", chunk_entries=1, member_entries=1)
    assert spy.call_count == len(ALIVE) * (1 + len(b))  # one member, one graph per chunk
    torch.testing.assert_close(many, one, rtol=1e-5, atol=1e-6)


def test_local_structure_once_per_chunk_for_any_number_of_members():
    """The index structures are built once per chunk of graphs, not once per member; the
    members run in chunks of `member_entries` with the same values."""
    stack = stack_of(3, seeds=tuple(range(6)))
    _, b = batches()[-1]
    counts = []
    for alive in ([1], list(range(6))):
        with mock.patch.object(local_loo, "loo_structure", wraps=local_loo.loo_structure) as spy:
            leave_one_out_members(stack, alive, b)
        counts.append(spy.call_count)
    assert counts[0] == counts[1] >= 1
    params = {k: v[[5, 1, 4]] for k, v in stack.params.items()}
    full, loo = loo_outputs_members(stack.base, params, b, chunk_nodes=200)
    with (mock.patch.object(local_loo, "loo_structure", wraps=local_loo.loo_structure) as st,
          mock.patch.object(local_loo, "loo_numeric", wraps=local_loo.loo_numeric) as num):
        full_s, loo_s = loo_outputs_members(stack.base, params, b, chunk_nodes=200,
                                            member_entries=1)  # one member at a time
    assert st.call_count > 1 and num.call_count == 3 * st.call_count
    torch.testing.assert_close(full_s, full, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(loo_s, loo, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kw", [dict(), dict(K=3, filters=(16, 16))])
def test_no_tensor_on_the_default_device(kw):
    """Every tensor is made on the batch's device: nothing lands on a `meta` default device."""
    stack = stack_of(3, **kw)
    _, b = batches()[0]
    ref = leave_one_out_members(stack, ALIVE, b)
    with torch.device("meta"):
        got = leave_one_out_members(stack, ALIVE, b)
    assert got.device == CPU
    torch.testing.assert_close(got, ref)


@pytest.mark.parametrize("kw", [dict(), dict(readout="max", filters=(16, 16))])
def test_attention_members_equals_leave_one_out_attention(kw):
    """Weak-supervision targets of every member = `leave_one_out_attention` member by member."""
    stack = stack_of(3, **kw)
    gs = splits()["test_large"]
    got = leave_one_out_attention_members(stack, ALIVE, gs, CPU, 16, "prob", 1e-3)
    assert got.shape == (len(ALIVE), len(gs.x)) and got.dtype == np.float32
    ref = np.stack([leave_one_out_attention(stack.materialise(i), gs, CPU, 16, "prob", 1e-3)
                    for i in ALIVE])
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)  # alpha of near-equal probs
