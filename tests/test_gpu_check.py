"""The GPU check runs on a CPU in its tiny mode, so it cannot rot between GPU machines; without
CUDA and without --tiny it refuses in one line."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


def _run(args, tmp_path):
    env = {**os.environ, "ABLATE_CACHE": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300)


@pytest.mark.slow
def test_tiny_mode_runs_every_section_without_the_cluster_stack(tmp_path):
    """Every section runs (tests, steps, both recipes, init) with `import ray` / optuna /
    hydra / omegaconf blocked, as on the GPU machine, and writes one JSON and one log."""
    out = tmp_path / "out"
    proc = _run([str(out), "--tiny"], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "gpu_check.json").read_text())
    sec = report["sections"]
    assert report["mode"] == "tiny" and report["machine"]["torch"] == torch.__version__
    assert {k: v["status"] for k, v in sec.items()} == {
        "tests": "ok", "steps": "ok", "colors_recipe": "ok", "triangles_recipe": "ok",
        "init": "ok", "authors": "skipped"}
    assert sec["tests"]["passed"] >= 2 and sec["tests"]["failed"] == 0  # CPU set-up tests ran
    assert len(sec["steps"]["rows"]) == 4 and all(r["replay_ms"] > 0 for r in sec["steps"]["rows"])
    assert sec["init"]["inits"] == 4 and sec["init"]["packs"] == 2
    assert sec["colors_recipe"]["acc_test_orig"] >= 0
    log = (out / "gpu_check.log").read_text()
    assert "=== init" in log and "gpu_check:" in log


def test_a_capped_recipe_reports_how_far_it_got(tmp_path):
    out = tmp_path / "out"
    proc = _run([str(out), "--tiny", "--only", "triangles_recipe", "--scale", "0"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    tri = json.loads((out / "gpu_check.json").read_text())["sections"]["triangles_recipe"]
    assert tri["status"] == "capped" and tri["epochs_done"] == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_without_cuda_the_full_check_refuses_in_one_line(tmp_path):
    proc = _run([str(tmp_path / "out")], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "no CUDA device" in proc.stderr
    assert not (tmp_path / "out").exists()
