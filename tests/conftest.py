"""Shared test set-up: one torch thread (tiny models run faster and steadier that way)."""

import os

import torch

torch.set_num_threads(1)
os.environ.setdefault("RAY_AUTH_MODE", "token")  # Ray 2.60: local test clusters need it
