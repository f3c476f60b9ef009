"""Real data at full size: prepared size, preparation time and the memory of every process.

Per data set, each step in a fresh process, with a fresh dataset cache:

- prepare: `load_graphsets` as the driver runs it before Ray starts (raw files fetched from
  an HTTP server on 127.0.0.1 for MNIST and the TU sets): seconds, the file's size, the
  process's peak resident memory (VmHWM; the superpixel pool's processes apart);
- evaluate: what a worker does with the prepared file for the study's global-pool row
  (its model fresh, untrained): load the recipe (memory-mapped), evaluate the largest
  test split (leave-one-out attention where the split has ground truth): seconds and
  peak memory, against the memory the runner declares to Ray for that trial.

Data sets: COLORS and TRIANGLES (the reference generators), MNIST-75SP from 70,000
generated 28x28 digit images (`bench_mnist_prep.digit_images`), a TU zip shaped like D&D
(1,178 graphs, mean ~265 nodes, one of 5,748, ~2.3 edges per node, 89 node labels) and one
shaped like COLLAB (5,000 dense ego-networks, mean ~74 nodes, max 492, ~2,460 edges each,
no node labels).

`--real-files DIR` (repeatable; `--tu-files` is the same option): the raw files found in DIR
that its `checksums.json` vouches for are served instead of generated ones: the real PROTEINS
and D&D zips of `shared/fixtures/tu` (`--datasets proteins,dd`), the real MNIST IDX files of
`shared/fixtures/mnist` (all four, or the generated images are used); the others are still
generated.

End to end (`--e2e`): the runner (`run_study`, an embedded Ray, two trials at once on 2
CPUs) trains two rows of the data set's study for one epoch each and evaluates them:
`--e2e-data mnist_sp` (default) the two ChebyGIN rows of `study=mnist` (global pool,
supervised attention) on the 70,000 generated images; `--e2e-data dd` the two D&D-200 rows
of `study=tu` (global pool; weakly supervised attention, whose worker first trains its
global-pool model and computes the leave-one-node-out attention of every training graph);
`--e2e-data collab` the two COLLAB rows of `study=tu` (the real COLLAB: a folder holding the
TU-layout COLLAB.zip that `shared/fixtures/tu/dgcnn_to_tu.py` writes and a checksums.json
naming its SHA-256, passed with --real-files).
A sampler reads every process's resident and proportional memory (RSS, PSS) twice a second.

    python benchmarks/bench_memory.py                        # every data set, then --e2e
    python benchmarks/bench_memory.py --datasets dd,collab --no-e2e
    python benchmarks/bench_memory.py --datasets none --e2e  # the end-to-end run only
    python benchmarks/bench_memory.py --datasets dd --tu-files ../shared/fixtures/tu --e2e-data dd
    python benchmarks/bench_memory.py --datasets mnist_sp --real-files ../shared/fixtures/mnist
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))  # the modules beside this script (not a package)
from bench_memory_raw import TU_SHAPES, Server, write_raw  # noqa: E402

DATASETS = ("colors", "triangles", "mnist_sp", "dd", "collab")
DOWNLOADED = {"mnist_sp", "proteins", "dd", "collab"}  # raw files served from 127.0.0.1
ROWS = {  # the global-pool row each data set's study trains (its evaluation is timed)
    "colors": {"backbone": "chebygin_ref", "pool_layers": ()},
    "triangles": {"backbone": "chebygin_ref", "pool_layers": ()},
    "mnist_sp": {"backbone": "chebygin_ref", "pool_layers": ()},
    "proteins": {"backbone": "gcn", "pool_layers": ()},
    "dd": {"backbone": "chebynet", "pool_layers": ()},  # study=tu's D&D rows (ChebyNet K = 3)
    "collab": {"backbone": "chebynet", "pool_layers": ()},
}
PARAMS = {"mnist_sp": {"final": True}, "dd": {"final": True, "split_seed": 0},
          "proteins": {"final": True, "split_seed": 0},
          "collab": {"final": True, "split_seed": 0}}


# ----------------------------------------------------------------------------- children


def _vmhwm_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child_prepare(name: str, params: dict) -> dict:
    from ablate.data import dataset_cache_path, load_graphsets

    t0 = time.perf_counter()
    splits = load_graphsets(name, **params)
    seconds = time.perf_counter() - t0
    path = dataset_cache_path(name, params)
    return {"prepare_s": seconds, "prepare_peak_mb": _vmhwm_mb(), "file_mb": path.stat().st_size / 1e6,
            "graphs": {k: len(v) for k, v in splits.items()}}


def child_evaluate(name: str, params: dict) -> dict:
    import torch

    from ablate.config import TrialConfig, resolve
    from ablate.data import dataset_recipe_hash, load_graphsets
    from ablate.runner.plan.resources import trials_memory
    from ablate.runner.study.expand import Trial
    from ablate.trial.batches import eval_batches
    from ablate.trial.evaluate import evaluate, loo_plan
    from ablate.trial.setup import model_sizes, prepare_process, seeded_model

    torch.set_num_threads(1)
    prepare_process()
    cfg = resolve(TrialConfig(dataset=name, data_params=params, **ROWS[name]))
    splits = load_graphsets(name, **params)
    tests = [s for s in splits if s.startswith("test")]
    split = max(tests, key=lambda s: (splits[s].total_nodes, s))  # the most nodes
    in_ch, out_ch = model_sizes(cfg, splits)
    model = seeded_model(cfg, 0, in_ch, out_ch, torch.device("cpu"))
    loo, note = loo_plan(cfg, split, splits[split])
    t0 = time.perf_counter()
    rec = evaluate(model, eval_batches(splits[split], cfg.test_batch_size), cfg, loo=loo)
    seconds = time.perf_counter() - t0
    trial = Trial("bench", "graph", cfg, name, cfg.data_params, dataset_recipe_hash(name, params))
    return {"split": split, "eval_graphs": len(splits[split]), "loo": loo, "note": note,
            "eval_s": seconds, "eval_peak_mb": _vmhwm_mb(),
            "declared_mb": (trials_memory([trial]) or 0) / 2**20,
            "accuracy": rec["accuracy"]}


# the two rows `--e2e-data` trains (study=mnist's ChebyGIN rows; study=tu's D&D-200 and
# COLLAB rows)
E2E_ROWS = {
    "mnist_sp": [{"backbone": "chebygin_ref", "pool_layers": []},
                 {"backbone": "chebygin_ref", "supervision": "sup"}],
    "dd": [{"backbone": "chebynet", "pool_layers": []},
           {"backbone": "chebynet", "pool_layers": [2], "supervision": "weak", "threshold": 0.001,
            "kl_weight": 1.0, "scorer": "fc", "init_dist": "normal"}],
    "collab": [{"backbone": "chebynet", "pool_layers": []},
               {"backbone": "chebynet", "pool_layers": [3], "supervision": "weak",
                "threshold": 0.001, "kl_weight": 1.0, "scorer": "fc", "init_dist": "default"}],
}


def child_e2e(name: str, params: dict, results: str) -> dict:
    from ablate.runner.execute.driver import run_study
    from ablate.runner.execute.store import read_trials
    from ablate.runner.plan.resources import trials_memory
    from ablate.runner.study.compose import StudySpec
    from ablate.runner.study.expand import Study, expand

    spec = StudySpec(name="e2e", fixed={"dataset": name, "epochs": 1},
                     data=dict(params), variants=E2E_ROWS[name], seeds=[0], cpus_per_trial=1,
                     gpus_per_trial=0, max_failures=0)
    study = Study(spec, expand(spec))
    summary = run_study(study, results, progress="none")
    rows = read_trials(results, "e2e")
    out = {"line": summary.line(), "exit": summary.exit_code,
           "declared_mb": [(trials_memory([t]) or 0) / 2**20 for t in study.trials],
           "timings": summary.timings}
    if len(rows):
        out["trials"] = rows.groupby("trial_id").agg(
            {"peak_rss_mb": "max", "train_s": "max", "eval_s": "sum", "pool_layers": "first",
             "supervision": "first", "accuracy": "mean"}).reset_index().to_dict("records")
    return out


# ----------------------------------------------------------------------------- sampler


class Sampler:
    """RSS and PSS of a process and all its descendants, twice a second: peak per process
    (named by its command line) and the peak of the sum of PSS."""

    def __init__(self, root: int):
        self.root, self.peaks, self.total_pss, self._stop = root, {}, 0.0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _tree(self) -> list[int]:
        kids: dict[int, list[int]] = {}
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                kids.setdefault(ppid, []).append(int(d.name))
        out, todo = [], [self.root]
        while todo:
            p = todo.pop()
            out.append(p)
            todo += kids.get(p, [])
        return out

    def _run(self) -> None:
        while not self._stop.is_set():
            pss_sum = 0.0
            for pid in self._tree():
                try:
                    name = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                    roll = Path(f"/proc/{pid}/smaps_rollup").read_text()
                except OSError:
                    continue
                val = {ln.split(":")[0]: int(ln.split()[1]) / 1024 for ln in roll.splitlines()[1:]
                       if ln.split(":")[0] in ("Rss", "Pss")}
                rss, pss, role = self.peaks.get(pid, (0.0, 0.0, ""))
                now = _role(name, pid == self.root)  # a Ray worker renames itself once busy
                role = now if _RANK.index(now) < _RANK.index(role) else role
                self.peaks[pid] = (max(rss, val.get("Rss", 0)), max(pss, val.get("Pss", 0)), role)
                pss_sum += val.get("Pss", 0)
            self.total_pss = max(self.total_pss, pss_sum)
            time.sleep(0.5)

    def stop(self) -> None:
        self._stop.set()
        self.thread.join()


_ROLES = (("ImplicitFunc", "trial worker"), ("default_worker", "Ray worker"),
          ("gcs_server", "Ray GCS"), ("/raylet", "raylet"), ("dashboard", "Ray dashboard"),
          ("runtime_env", "Ray agent"), ("log_monitor", "Ray log monitor"),
          ("ray::", "Ray worker"), ("ray/", "Ray process"))
_RANK = ["driver", *dict.fromkeys(r for _, r in _ROLES), "other", ""]


def _role(cmdline: str, root: bool) -> str:
    if root:
        return "driver"
    return next((role for key, role in _ROLES if key in cmdline), "other")


# ----------------------------------------------------------------------------- main


def run_child(mode: str, name: str, params: dict, env: dict, extra: list[str] = (),
              sample: bool = False) -> tuple[dict, Sampler | None]:
    cmd = [sys.executable, __file__, "--child", mode, name, json.dumps(params), *extra]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, cwd=ROOT, text=True)
    sampler = Sampler(proc.pid) if sample else None
    out, _ = proc.communicate()
    if sampler:
        sampler.stop()
    if proc.returncode:
        raise RuntimeError(f"{mode} {name} failed ({proc.returncode})")
    return json.loads(out.strip().splitlines()[-1]), sampler


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default=",".join(DATASETS), help="comma list, or 'none'")
    ap.add_argument("--e2e", dest="e2e", action="store_true", default=True)
    ap.add_argument("--no-e2e", dest="e2e", action="store_false")
    ap.add_argument("--e2e-data", choices=tuple(E2E_ROWS), default="mnist_sp",
                    help="the data set whose two rows the end-to-end run trains")
    ap.add_argument("--real-files", "--tu-files", dest="real_files", type=Path, action="append",
                    default=[], help="serve the raw files of this folder (and its checksums.json) "
                    "instead of generated ones: shared/fixtures/tu (real PROTEINS and D&D), "
                    "shared/fixtures/mnist (real MNIST); repeatable")
    ap.add_argument("--work", help="keep raw files and caches here (default: a temp folder)")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        mode, name, params = args.child[0], args.child[1], json.loads(args.child[2])
        fn = {"prepare": child_prepare, "evaluate": child_evaluate}.get(mode)
        out = fn(name, params) if fn else child_e2e(name, params, args.child[3])
        print(json.dumps(out, default=str))
        return
    work = Path(args.work or tempfile.mkdtemp(prefix="bench_memory_"))
    work.mkdir(parents=True, exist_ok=True)
    from ablate.trial.provenance import git_sha, tree_state

    prov = {"git_sha": git_sha(), "git_dirty": tree_state(str(Path(__file__).resolve().parent)),
            "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": " ".join(sys.argv)}
    print(f"# provenance: {json.dumps(prov)}", flush=True)  # tables.py reads it
    try:
        _measure(args, work)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


def _measure(args, work: Path) -> None:
    names = [] if args.datasets == "none" else args.datasets.split(",")
    serve = work / "serve"
    serve.mkdir(exist_ok=True)
    sums: dict[str, str] = {}
    sums_file = work / "sums.json"
    if sums_file.exists():
        sums = json.loads(sums_file.read_text())
    real = _real_files(args.real_files)
    # what each served file is (a reused --work may hold the other kind): file -> real / generated
    kinds_file = work / "sources.json"
    kinds = json.loads(kinds_file.read_text()) if kinds_file.exists() else {}
    for name in {*names, *([args.e2e_data] if args.e2e else [])} & DOWNLOADED:
        files = raw_files(name)
        if is_real(name, real):
            for f in files:
                shutil.copyfile(real[f][0] / f, serve / f)
                sums[f], kinds[f] = real[f][1], "real"
            print(f"# serving the real {', '.join(files)} of {real[files[0]][0]}", flush=True)
        elif name not in TU_SHAPES and name != "mnist_sp":
            raise SystemExit(f"{name}: no generator for its shape; serve the real zip (--real-files)")
        elif any(f not in sums or kinds.get(f) != "generated" for f in files):
            t0 = time.time()
            made = write_raw(name, serve)
            sums.update(made)
            kinds.update(dict.fromkeys(made, "generated"))
            print(f"# generated {name} raw files in {time.time() - t0:.0f} s", flush=True)
    sums_file.write_text(json.dumps(sums))
    kinds_file.write_text(json.dumps(kinds))
    server = Server(serve)
    base = {**os.environ, "ABLATE_DATA_CHECKSUMS": str(sums_file), "ABLATE_MNIST_URL": server.url,
            "ABLATE_TU_URL": server.url, "PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": "token"}
    rows = []
    try:
        for name in names:
            env = {**base, "ABLATE_CACHE": str(work / f"cache-{name}-{_kind(name, real)}")}
            params = PARAMS.get(name, {})
            prep, _ = run_child("prepare", name, params, env)
            ev, _ = run_child("evaluate", name, params, env)
            rows.append((name, prep, ev))
            source = {"source": "real" if is_real(name, real) else "generated"}
            print(f"# {name}: {json.dumps({**prep, **ev, **source})}", flush=True)
        if names:
            _table(rows)
        if args.e2e:
            env = {**base, "ABLATE_CACHE": str(work / f"cache-{args.e2e_data}-"
                                                      f"{_kind(args.e2e_data, real)}")}
            results = work / "e2e-results"
            shutil.rmtree(results, ignore_errors=True)
            t0 = time.time()
            out, sampler = run_child("e2e", args.e2e_data, PARAMS[args.e2e_data], env,
                                     [str(results)], sample=True)
            _e2e_table(out, sampler, time.time() - t0)
            rec = {"data": args.e2e_data,
                   "source": "real" if is_real(args.e2e_data, real) else "generated",
                   "wall_s": round(time.time() - t0, 1), "exit": out["exit"], "line": out["line"],
                   "trials": out.get("trials", []), "declared_mb": out["declared_mb"],
                   "processes": [{"role": role, "peak_rss_mb": round(rss), "peak_pss_mb": round(pss)}
                                 for rss, pss, role in sorted(sampler.peaks.values(), reverse=True)
                                 if rss >= 50],
                   "all_pss_peak_mb": round(sampler.total_pss)}
            print(f"# e2e_{args.e2e_data}: {json.dumps(rec, default=str)}", flush=True)
    finally:
        server.close()


def raw_files(name: str) -> tuple[str, ...]:
    """The raw files the data set `name` is prepared from (what its download fetches)."""
    from ablate.data.download import MNIST_FILES

    return tuple(f"{f}.gz" for f in MNIST_FILES) if name == "mnist_sp" else (f"{name.upper()}.zip",)


def is_real(name: str, real: dict[str, tuple[Path, str]]) -> bool:
    """Whether every raw file of `name` is among the real files served."""
    return all(f in real for f in raw_files(name))


def _kind(name: str, real: dict[str, tuple[Path, str]]) -> str:
    """'real' or 'generated': the raw files `name` is prepared from in this run (the caches of
    the two kept apart, so a reused --work never labels one the other)."""
    return "real" if is_real(name, real) else "generated"


def _real_files(folders: list[Path]) -> dict[str, tuple[Path, str]]:
    """The files of `folders` that their checksums.json vouches for: name -> (folder, checksum)."""
    got: dict[str, tuple[Path, str]] = {}
    for folder in folders:
        sums = folder / "checksums.json"
        if not sums.is_file():
            raise SystemExit(f"--real-files {folder}: no checksums.json there")
        got.update({k: (folder, v) for k, v in json.loads(sums.read_text()).items()
                    if (folder / k).is_file()})
    return got


def _table(rows) -> None:
    print("\n| data set | graphs (train / largest test) | prepared | prepare | driver peak | "
          "largest test split: evaluate (leave-one-out) | worker peak | declared to Ray |")
    print("|---|---|---:|---:|---:|---|---:|---:|")
    for name, prep, ev in rows:
        g = prep["graphs"]
        loo = "with" if ev["loo"] else "no"
        print(f"| {name} | {g.get('train')} / {ev['eval_graphs']} | {prep['file_mb']:.1f} MB | "
              f"{prep['prepare_s']:.1f} s | {prep['prepare_peak_mb']:.0f} MB | "
              f"{ev['split']}: {ev['eval_s']:.1f} s ({loo} leave-one-out) | "
              f"{ev['eval_peak_mb']:.0f} MB | {ev['declared_mb']:.0f} MB |")


def _e2e_table(out: dict, sampler: Sampler, wall: float) -> None:
    print(f"\nend to end ({wall:.0f} s wall, the process included): {out['line']}")
    print(f"timings: { {k: round(v, 1) for k, v in out['timings'].items()} }")
    for t in out.get("trials", []):
        row = "global pool" if not t["pool_layers"] else t["supervision"]
        print(f"  trial {row}: train {t['train_s']:.0f} s, evaluation {t['eval_s']:.0f} s, "
              f"worker peak {t['peak_rss_mb']:.0f} MB (its own ru_maxrss)")
    print(f"declared to Ray per trial: {', '.join(f'{m:.0f} MB' for m in out['declared_mb'])}")
    print("\n| process | peak RSS | peak PSS |\n|---|---:|---:|")
    for pid, (rss, pss, role) in sorted(sampler.peaks.items(), key=lambda kv: -kv[1][0]):
        if rss >= 50:
            print(f"| {role} (pid {pid}) | {rss:.0f} MB | {pss:.0f} MB |")
    print(f"| all processes together (peak of the summed PSS) | | {sampler.total_pss:.0f} MB |")


if __name__ == "__main__":
    main()
