"""The members of a pack and their stacked state.

A *member* is one seed of one resolved configuration. The members of a pack
share every shape; `MemberStack` holds their parameters stacked along a leading
dimension (S, ...) for `torch.func` and the per-member hyperparameters
(`STACKED`) that the forward takes as tensors.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch.func import stack_module_state

from ablate.config import TrialConfig
from ablate.models.network import GraphNet
from ablate.trial.setup import seeded_model

STACKED = ("threshold", "ratio", "kl_weight")  # per-member values fed to the forward as tensors


@dataclass(frozen=True)
class Member:
    """One seed of one resolved configuration."""

    cfg: TrialConfig
    seed: int


class MemberStack:
    """S members as stacked parameters and hyperparameters, with a template `GraphNet`.

    Args:
        members: resolved configs sharing a `pack_key`, one seed each, in order.
        in_ch, out_ch: model sizes; device: where the stack lives.
    """

    def __init__(self, members: list[Member], in_ch: int, out_ch: int, device: torch.device):
        self.members = list(members)
        self.in_ch = in_ch  # node features of the input (an eval forward's width)
        models = [seeded_model(m.cfg, m.seed, in_ch, out_ch, device) for m in self.members]
        self.models = models  # one materialised model per member (leave-one-out evaluation)
        self.base = copy.deepcopy(models[0])  # template for functional_call
        params, _ = stack_module_state(models)  # GraphNet has no buffers
        self.params = {k: v.detach() for k, v in params.items()}  # (S, ...) each
        self.hyper = {k: torch.tensor([float(getattr(m.cfg, k)) for m in self.members],
                                      device=device) for k in STACKED}  # (S,) each
        self.regression = models[0].regression

    def __len__(self) -> int:
        return len(self.members)

    def materialise(self, i: int) -> GraphNet:
        """Member i's `GraphNet` holding its current parameters."""
        m = self.models[i]
        with torch.no_grad():
            for k, p in m.named_parameters():
                p.copy_(self.params[k][i])
        return m
