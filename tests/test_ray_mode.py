"""Embedded Ray or a cluster, and whether the prepared data is shipped: one rule for grid and
search studies (`ablate.runner.execute.ray_env.RayMode`, issue 42 item 7).

The `ray_address` option wins, else $RAY_ADDRESS, else an embedded local Ray, as `start_ray`
joins; a joined cluster always gets the data through the object store, an embedded Ray only
once it has more than one node. Each decision is checked through $RAY_ADDRESS without
starting a cluster: the pure rule, `start_ray`'s join (ray.init stood in for), a grid study's
start (Ray's starter and Tune stood in for) and a search trial's resources.
"""

from __future__ import annotations

import io
import os
from types import SimpleNamespace

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "token")  # before `import ray` (DESIGN.md)

from ablate.runner.execute import ray_env  # noqa: E402
from ablate.runner.execute.ray_env import RayMode, ship_data  # noqa: E402
from ablate.runner.plan.checks import cluster_address  # noqa: E402

CLUSTER = "10.0.0.1:6379"
OPTION = "10.0.0.2:6379"


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


def test_without_option_or_env_a_run_is_embedded_and_ships_only_to_other_nodes(no_env):
    mode = RayMode.of(None)
    assert cluster_address(None) is None and cluster_address("") is None
    assert mode.address is None and mode.embedded
    assert not mode.ship(1) and mode.ship(2)  # a second node has its own disk


def test_ray_address_env_joins_a_cluster_and_ships(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", CLUSTER)
    mode = RayMode.of(None)
    assert cluster_address(None) == CLUSTER and mode.address == CLUSTER
    assert not mode.embedded and mode.ship(1) and mode.ship(3)


def test_an_explicit_ray_address_option_wins_over_the_env(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", CLUSTER)
    assert cluster_address(OPTION) == OPTION and RayMode.of(OPTION).address == OPTION
    monkeypatch.setenv("RAY_ADDRESS", "")  # set but empty: no cluster
    assert RayMode.of(None).embedded and cluster_address(None) is None


def test_a_ray_the_caller_started_counts_as_a_cluster(no_env):
    mode = RayMode.of(None, started=False)
    assert not mode.embedded and mode.ship(1)
    assert ship_data(True, 1) is False and ship_data(True, 2) and ship_data(False, 1)


@pytest.mark.parametrize("option, env, joined", [
    (None, CLUSTER, CLUSTER), (OPTION, CLUSTER, OPTION), (OPTION, None, OPTION)])
def test_start_ray_joins_what_the_rule_names(monkeypatch, option, env, joined):
    import ray

    if env is None:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("RAY_ADDRESS", env)
    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw))
    monkeypatch.setattr(ray_env, "check_cluster_reachable", lambda address: None)  # no cluster
    assert ray_env.start_ray(option) is True
    assert [c["address"] for c in calls] == [joined] == [RayMode.of(option).address]


class _Starter:
    """`RayStarter` stood in for: records the address it was given, starts nothing."""

    def __init__(self, address):
        self.address, self.seconds = address, 0.0
        _Starter.made.append(self)

    def wait(self, raise_errors=True):
        return True


def _grid_start(monkeypatch, option) -> tuple[str | None, bool]:
    """A grid study's start (`driver._start_and_run`) with no trial and nothing started: the
    address its Ray starter got and whether Tune's run is told the Ray is embedded."""
    from ablate.runner.execute import driver

    seen = {}
    _Starter.made = []
    monkeypatch.setattr(driver, "RayStarter", _Starter)
    monkeypatch.setattr(driver, "check_cluster_reachable", lambda address: None)  # no cluster
    monkeypatch.setattr(driver, "prepare_datasets", lambda *a, **k: {})
    monkeypatch.setattr(driver, "node_memory_estimate", lambda: 1 << 40)
    monkeypatch.setattr(driver, "_stop_ray", lambda *a, **k: None)
    monkeypatch.setattr(driver, "_run_tune",
                        lambda *a, embedded, **k: seen.setdefault("embedded", embedded))
    summary = SimpleNamespace(timings={}, signal=None, remaining=[])
    display = SimpleNamespace(step=lambda *a, **k: None)
    driver._start_and_run(None, [], None, summary, option, display, io.StringIO(), 0.0)
    [starter] = _Starter.made
    return starter.address, seen["embedded"]


def test_a_grid_study_decides_by_the_same_rule(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert _grid_start(monkeypatch, None) == (None, True)
    monkeypatch.setenv("RAY_ADDRESS", CLUSTER)
    assert _grid_start(monkeypatch, None) == (CLUSTER, False)
    assert _grid_start(monkeypatch, OPTION) == (OPTION, False)


def _search_ship(monkeypatch, option_args: list[str], nodes: int,
                 started: bool = True) -> tuple[bool, bool]:
    """A search trial's resources (`tuning.search_resources`) with Ray stood in for (up,
    `nodes` nodes): whether its data is shipped and whether the memory check saw an
    embedded Ray."""
    import ray

    import ablate.runner.execute.ship as ship
    import ablate.runner.plan.resources as resources
    from ablate.runner.search import tuning
    from ablate.runner.study.search_spec import arm_config, load_search_spec

    arm = "colors_chebygin_unsup"
    spec = load_search_spec("threshold_search", [f"arms={arm}", *option_args])
    cfg = arm_config(spec, arm)
    got = {}
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "nodes", lambda: [{"Alive": True}] * nodes)
    monkeypatch.setattr(resources, "cluster_node_memory", lambda: [1 << 40])
    monkeypatch.setattr(resources, "trials_memory", lambda trials: 1 << 20)
    monkeypatch.setattr(resources, "check_memory",
                        lambda needs, have, embedded: got.setdefault("embedded", embedded) and "")
    monkeypatch.setattr(ship, "dataset_pieces", lambda trials, shipped: got.setdefault("ship", shipped))
    tuning.search_resources(spec, cfg, {}, started)
    return got["ship"], got["embedded"]


def test_a_search_study_decides_by_the_same_rule_through_ray_address(monkeypatch, tmp_path):
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert _search_ship(monkeypatch, [], nodes=1) == (False, True)  # embedded, one node
    assert _search_ship(monkeypatch, [], nodes=2) == (True, True)
    monkeypatch.setenv("RAY_ADDRESS", CLUSTER)  # the env alone: a cluster, as start_ray joins
    assert _search_ship(monkeypatch, [], nodes=1) == (True, False)
    monkeypatch.delenv("RAY_ADDRESS")
    assert _search_ship(monkeypatch, [f"ray_address={OPTION}"], nodes=1) == (True, False)
    # a Ray already running in this process when the search began: a cluster, as for grids
    assert _search_ship(monkeypatch, [], nodes=1, started=False) == (True, False)


def _can_unshare_network() -> bool:
    import shutil
    import subprocess

    return bool(shutil.which("unshare")) and subprocess.run(
        ["unshare", "-rn", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _can_unshare_network(), reason="needs unprivileged network namespaces")
def test_an_unreachable_loopback_is_one_line_at_once_not_minutes_of_ray_waiting(tmp_path):
    """In a fresh network namespace 127.0.0.1 is down: Ray's GCS start would wait ~10 minutes
    and end in a traceback. The run says why in one line, before Ray, and exits 2."""
    import subprocess
    import sys
    import time

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    t0 = time.time()
    run = subprocess.run(["unshare", "-rn", sys.executable, "-m", "ablate.run", "study=smoke",
                          f"results_dir={tmp_path}", "progress=none", "seeds=[0]",
                          "dataset=colors", "backbone=gin"],
                         capture_output=True, text=True, timeout=300, cwd=root)
    assert run.returncode == 2, (run.stdout, run.stderr)
    lines = [ln for ln in run.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "127.0.0.1" in lines[0] and "Traceback" not in run.stderr, run.stderr
    assert time.time() - t0 < 120


def test_an_embedded_ray_that_does_not_start_is_one_line(monkeypatch):
    import ray

    from ablate.errors import ConfigError

    def failing(**kw):
        raise RuntimeError("Failed to start GCS.  Last 0 lines of error files:\n\n.Please check")

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", failing)
    monkeypatch.setattr(ray_env, "clean_ray_leftovers", lambda: None)
    with pytest.raises(ConfigError, match=r"^the embedded Ray did not start \(Failed to start "
                                          r"GCS\.  Last 0 lines of error files:\)"):
        ray_env.start_ray(None)


def test_a_ray_temp_folder_that_cannot_be_made_is_one_line(tmp_path):
    """RAY_TMPDIR under a file: Ray's own OSError, as one line and exit 2 (no logs to name)."""
    import subprocess
    import sys

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    run = subprocess.run([sys.executable, "-m", "ablate.run", "study=smoke", "progress=none",
                          f"results_dir={tmp_path / 'results'}"], capture_output=True, text=True,
                         timeout=300, cwd=root, env={**{k: v for k, v in os.environ.items()
                                                       if k != "RAY_ADDRESS"},
                                                    "RAY_TMPDIR": str(blocker / "x")})
    assert run.returncode == 2, (run.stdout, run.stderr)
    errors = [ln for ln in run.stderr.splitlines() if ln.startswith("error:")]
    assert errors == [f"error: the embedded Ray did not start ([Errno 20] Not a directory: "
                      f"'{blocker / 'x'}')"], run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("study", ["smoke", "threshold_search"])  # a grid and a search study
def test_a_cluster_address_nothing_answers_on_is_one_line_in_seconds(tmp_path, study):
    """Ray retries a dead GCS address for minutes (measured: still waiting after 5 min); the run
    says so at once, before the data is prepared, and exits 2."""
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    t0 = time.time()
    run = subprocess.run([sys.executable, "-m", "ablate.run", f"study={study}",
                          f"results_dir={tmp_path}"], capture_output=True, text=True, timeout=300,
                         cwd=root, env={**os.environ, "RAY_ADDRESS": f"127.0.0.1:{port}"})
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert "Traceback" not in run.stderr, run.stderr
    assert [ln for ln in run.stderr.splitlines() if ln.startswith("error:")] == [
        f"error: cannot join the Ray cluster at '127.0.0.1:{port}': nothing answers at "
        f"127.0.0.1:{port} (Connection refused); start one (ray start --head, ray up "
        "cluster.yaml) or unset RAY_ADDRESS / ray_address= to run on an embedded local Ray"]
    assert time.time() - t0 < 120


def test_a_cluster_address_that_answers_passes_the_check():
    import socket

    from ablate.runner.plan.checks import check_cluster_reachable

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        host, port = s.getsockname()
        check_cluster_reachable(f"{host}:{port}")
        check_cluster_reachable(f"ray://{host}:{port}")
    for left_to_ray in ("auto", None, "", "localhost"):
        check_cluster_reachable(left_to_ray)
