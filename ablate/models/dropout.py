"""Counter-based dropout: a mask that is a pure function of (seed, step, layer, element).

`torch.nn.Dropout` draws its mask from the host-side RNG stream, so a member's mask
depends on everything that drew from that stream before it: two seeds trained in one
pack could not reproduce the masks each gets alone, and a captured CUDA graph would
replay the masks of its capture. Here the mask is a hash instead:

    key  = mix(seed, step, layer)           (a 0-dim int64 tensor)
    u[i] = mix2(i, key) / 2^24              (i = flat index of the element in x)
    keep = u >= p,  out = x * keep / (1 - p) in training, x in eval

`mix` is a 32-bit integer finaliser (xor-shifts and odd multiplications, several
rounds) computed with int64 torch ops on the tensor's device: every value stays below
2^32 and every multiplier below 2^31, so no product overflows int64 and every device
gives the same bits. The mask needs no host RNG, no `.item()` and no data-dependent
shape, so it runs inside `torch.func.vmap` (a per-member seed as a batched 0-dim
tensor, a shared step) and inside CUDA graph capture (the step is a device counter
advanced in place, so each replay draws a new mask).

The seed is the member's seed (`Member.seed`, or the seed `fit` gets), the step the
number of optimisation steps taken before this one, the layer a small id per dropout
site: the same member gets the same masks whether it trains alone or in any pack.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

MASK32 = 0xFFFFFFFF
_M1, _M2 = 0x7FEB352D, 0x5BD1E995  # odd multipliers < 2^31: (< 2^32) * (< 2^31) fits int64
_GOLDEN, _SALT = 0x9E3779B9, 0x85EBCA6B  # distinct keys for the seed and the second round
U_BITS = 24  # u = (hash >> 8) / 2^24: exact in float32


def _mix(h: Tensor) -> Tensor:
    """A bijective 32-bit finaliser on int64 tensors holding values in [0, 2^32)."""
    h = h ^ (h >> 16)
    h = (h * _M1) & MASK32
    h = h ^ (h >> 15)
    h = (h * _M2) & MASK32
    return h ^ (h >> 16)


def _u32(v: Tensor | int, device: torch.device | None) -> Tensor:
    """v as an int64 tensor on `device` (a tensor stays where it is), reduced to 32 bits."""
    t = v if isinstance(v, Tensor) else torch.tensor(v, dtype=torch.int64, device=device)
    return t.to(torch.int64) & MASK32


def dropout_key(seed: Tensor | int, step: Tensor | int, layer: int,
                device: torch.device | None = None) -> Tensor:
    """The 0-dim int64 key of (seed, step, layer), in [0, 2^32).

    seed: a member's seed (all 64 bits enter the key); step: optimisation steps taken
    before this one (taken mod 2^32); layer: the dropout site's id. Tensors may be
    batched by vmap; ints become tensors on `device`.
    """
    s = seed if isinstance(seed, Tensor) else torch.tensor(seed, dtype=torch.int64, device=device)
    s = s.to(torch.int64)
    k = _mix((s & MASK32) ^ _GOLDEN)
    k = _mix(k ^ ((s >> 32) & MASK32))
    k = _mix(k ^ _u32(step, s.device))
    return _mix(k ^ (layer & MASK32))


def _bits(shape: tuple[int, ...] | torch.Size, key: Tensor) -> Tensor:
    """24 hashed bits (int64 in [0, 2^24)) per element of `shape`, a pure function of
    (key, flat element index); on the key's device."""
    n = math.prod(shape)
    if n > MASK32:
        raise ValueError(f"counter dropout hashes at most 2^32 elements, got {n}")
    idx = torch.arange(n, dtype=torch.int64, device=key.device).reshape(shape)
    v = _mix(_mix(idx ^ key) ^ _mix(key ^ _SALT))
    return v >> (32 - U_BITS)


def uniform(shape: tuple[int, ...] | torch.Size, key: Tensor) -> Tensor:
    """Uniform float32 values in [0, 1) on multiples of 2^-24 (exact), one per element."""
    return _bits(shape, key).to(torch.float32) * 2.0 ** -U_BITS


def keep_mask(shape: tuple[int, ...] | torch.Size, p: float, seed: Tensor | int,
              step: Tensor | int, layer: int, device: torch.device | None = None) -> Tensor:
    """Boolean keep mask of `shape`: u >= p for u = `uniform(shape, dropout_key(...))`.

    Compared in integers (u >= p iff u * 2^24 >= ceil(p * 2^24)), so no rounding of p
    can differ between devices.
    """
    key = dropout_key(seed, step, layer, device)
    return _bits(shape, key) >= math.ceil(p * 2 ** U_BITS)


def counter_dropout(x: Tensor, p: float, seed: Tensor | int, step: Tensor | int, layer: int = 0,
                    training: bool = True) -> Tensor:
    """x with the elements of `keep_mask(x.shape, ...)` kept and scaled by 1/(1-p) in training;
    x itself in eval or when p == 0."""
    if not training or p == 0:
        return x
    keep = keep_mask(x.shape, p, seed, step, layer, x.device)
    return x * (keep.to(x.dtype) / (1.0 - p))


class CounterDropout(nn.Dropout):
    """`nn.Dropout` whose mask is `keep_mask(x.shape, p, seed, step, layer)`.

    `forward(x, seed, step)`: seed (a member's seed, 0-dim tensor or int) and step (the
    optimisation step counter, a 0-dim device tensor); without them (a forward outside
    `fit` or the packed step) the key of seed 0, step 0. Identity in eval.
    """

    def __init__(self, p: float, layer: int = 0):
        super().__init__(p)
        self.layer = layer

    def forward(self, x: Tensor, seed: Tensor | int | None = None,
                step: Tensor | int | None = None) -> Tensor:
        return counter_dropout(x, self.p, 0 if seed is None else seed, 0 if step is None else step,
                               self.layer, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, layer={self.layer}, counter-based"
