"""cluster.yaml passes Ray's own cluster-launcher validation, as does its on-premise variant."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

PATH = Path(__file__).resolve().parent.parent / "cluster.yaml"


def _validated(cfg: dict) -> dict:
    """What `ray up` does before it contacts the provider: fill defaults, then validate."""
    prepared = prepare_config(copy.deepcopy(cfg))
    validate_config(prepared)
    return prepared


def test_cloud_config_is_valid_with_head_and_gpu_worker():
    cfg = yaml.safe_load(PATH.read_text())
    prepared = _validated(cfg)
    assert cfg["provider"]["type"] == "aws"
    types = prepared["available_node_types"]
    assert set(types) == {"head", "gpu_worker"} and prepared["head_node_type"] == "head"
    assert types["gpu_worker"]["node_config"]["InstanceType"].startswith("g")
    setup = " ".join(cfg["setup_commands"])
    assert "pip install" in setup and "~/ablate" in setup  # installs this project
    assert cfg["file_mounts"]["~/ablate"] == "."
    assert "FILL IN" in PATH.read_text()


def test_commented_local_variant_is_valid():
    text = PATH.read_text()
    block = text.split("# BEGIN local\n")[1].split("# END local")[0]
    local = yaml.safe_load("\n".join(line[2:] for line in block.splitlines()))
    cfg = yaml.safe_load(text)
    for key in ("provider", "auth", "available_node_types", "head_node_type", "max_workers"):
        cfg.pop(key)
    cfg.update(local)
    prepared = _validated(cfg)
    assert prepared["provider"]["type"] == "local"
    assert prepared["provider"]["worker_ips"] and prepared["provider"]["head_ip"]


def test_every_ray_start_requires_token_auth_and_a_local_dashboard():
    cfg = yaml.safe_load(PATH.read_text())
    starts = cfg["head_start_ray_commands"] + cfg["worker_start_ray_commands"]
    for cmd in (c for c in starts if "ray start" in c):
        assert "export RAY_AUTH_MODE=token" in cmd and "test -s ~/.ray/auth_token &&" in cmd
    head = next(c for c in cfg["head_start_ray_commands"] if "ray start" in c)
    assert "--dashboard-host=127.0.0.1" in head
    assert cfg["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"
    text = PATH.read_text()
    assert "ray get-auth-token --generate" in text and "RAY_AUTH_MODE=token python -m ablate.run" in text
