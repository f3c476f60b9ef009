"""TU fidelity: the authors' own TU code and ours on the same real files and the same splits.

    python benchmarks/tu_fidelity.py --authors /path/to/graph_attention_pool \\
        --rows proteins_global,proteins_weak --seeds 0,1,2 --side both
    python benchmarks/tu_fidelity.py --rows dd300_global --seeds 0 --side ours --epochs 5

What runs:
- the authors' side: their unmodified `main.py` (bknyaz/graph_attention_pool, a checkout
  passed as --authors, fetched by the user; nothing of it is copied into this project) as a
  subprocess, with the flags of their TU commands (`scripts/jobs.txt`, commit 3a2442d;
  README's PROTEINS example): `-D TU --n_nodes N --epochs 50 --lr_decay_step 25,35,45
  -f 64,64,64 --readout max --dropout 0.1`, `-K 1` for PROTEINS, `-K 3 --aggregation mean
  --n_hidden 0 --test_batch_size 10` for D&D, and for the weak rows `--pool
  attn_sup_threshold_skip_skip_<t> --pool_arch fc_prev --kl_weight <w> --init normal --scale
  1` (their 'sup' on TU is weak supervision), without cross-validation (fixed values, as
  `studies/tu.yaml`), `--seed s --seed_data s`, `--device cpu`.
  Adapters for today's machines, nothing else: a stand-in `torchvision` module (their code
  imports it for MNIST only; PyPI's torchvision does not load beside this torch build), and
  the raw TU text files unzipped into a scratch folder per data set (their reader writes its
  `data.pkl` cache there).
- our side: `ablate.trial.graph.run_trial` on the same files (`data.path=`), the `tu` study's
  recipe of the row, `split_seed=s`, `final: true`, seed s.
- the split: ours (`split=authors`, the default) draws the train/val graphs with NumPy's
  `RandomState(s).permutation` over the small graphs, 500 of them (1,000 where more than 1,000
  are small), as their `DataReader.split_ids_shape`; the script checks, per dataset and seed,
  that their function (imported from the checkout) gives the same train and test ids as ours.

Each (side, row, seed) is a JSON line in --out: test accuracy (%), train accuracy, seconds
(with the machine's load at the end, `load_1min`),
peak RSS, the train / test counts and the split check. `--summary` prints mean +- std per side
and row, and a two-sample test (Welch's t and Mann-Whitney U, both directions) of the two
sides' seeds per row.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FIXTURES = ROOT.parent / "shared" / "fixtures" / "tu"

# row -> (TU name, max_train_nodes, our TrialConfig fields, the authors' extra flags)
WEAK = dict(threshold=0.001, kl_weight=1.0, scorer="fc", init_dist="normal")
ROWS: dict[str, tuple[str, int, dict, list[str]]] = {
    "proteins_global": ("PROTEINS", 25, dict(dataset="proteins", backbone="gcn", pool_layers=()), []),
    "proteins_weak": ("PROTEINS", 25, dict(dataset="proteins", backbone="gcn", pool_layers=(2,),
                                           supervision="weak", **WEAK), ["weak"]),
    "dd200_global": ("DD", 200, dict(dataset="dd", backbone="chebynet", pool_layers=()), []),
    "dd200_weak": ("DD", 200, dict(dataset="dd", backbone="chebynet", pool_layers=(2,),
                                   supervision="weak", **WEAK), ["weak"]),
    "dd300_global": ("DD", 300, dict(dataset="dd", backbone="chebynet", pool_layers=()), []),
    "dd300_weak": ("DD", 300, dict(dataset="dd", backbone="chebynet", pool_layers=(2,),
                                   supervision="weak", **WEAK), ["weak"]),
    # COLLAB (issue 52): ChebyNet K = 3, attention after the last layer, p at the framework's
    # init (their README's COLLAB command: `skip_skip_skip`, `--scale None`)
    "collab_global": ("COLLAB", 35, dict(dataset="collab", backbone="chebynet", pool_layers=()), []),
    "collab_weak": ("COLLAB", 35, dict(dataset="collab", backbone="chebynet", pool_layers=(3,),
                                       supervision="weak", **{**WEAK, "init_dist": "default"}),
                    ["weak"]),
    # ours only: D&D with the recipe before issue 33 (GCN, K = 1) on the authors' splits
    "dd200_global_gcn": ("DD", 200, dict(dataset="dd", backbone="gcn", pool_layers=()), []),
    "dd300_global_gcn": ("DD", 300, dict(dataset="dd", backbone="gcn", pool_layers=()), []),
}
TORCHVISION_STANDIN = '''"""Stand-in for torchvision: the authors' code imports it for MNIST only."""
import types
class _MNIST:  # graphdata.MNIST subclasses torchvision.datasets.MNIST
    pass
datasets = types.SimpleNamespace(MNIST=_MNIST)
transforms = types.SimpleNamespace(ToTensor=lambda: None)
'''


def unzip(name: str, zips: Path, scratch: Path) -> Path:
    """The raw text files of `name` in `scratch/name` (what their DataReader lists). COLLAB's
    TU-layout zip (58 MB) is not in the fixtures: it is built once into `scratch` from the
    DGCNN-format copy with the fixtures' own `dgcnn_to_tu.py` (a few minutes)."""
    out = scratch / name
    if not (out / f"{name}_A.txt").is_file():
        out.mkdir(parents=True, exist_ok=True)
        source = zips / f"{name}.zip"
        if not source.is_file() and (zips / "dgcnn" / f"{name}.zip").is_file():
            source = scratch / f"{name}.zip"
            if not source.is_file():
                subprocess.run([sys.executable, str(zips / "dgcnn_to_tu.py"),
                                str(zips / "dgcnn" / f"{name}.zip"), name, str(source)], check=True)
        with zipfile.ZipFile(source) as z:
            for member in z.namelist():
                base = Path(member).name
                if base.startswith(f"{name}_") and base.endswith(".txt"):
                    (out / base).write_bytes(z.read(member))
    return out


def standin_path(scratch: Path) -> Path:
    folder = scratch / "standins"
    (folder / "torchvision").mkdir(parents=True, exist_ok=True)
    (folder / "torchvision" / "__init__.py").write_text(TORCHVISION_STANDIN)
    return folder


NUMPY_ALIAS = '''"""NumPy 1.24 removed the alias `np.int` that the authors' one-hot-degree path uses
(graphdata.py, COLLAB has no node labels): restored as the builtin it stood for."""
import numpy
numpy.int = int
'''


def numpy_alias_path(scratch: Path) -> Path:
    """A folder whose `sitecustomize.py` restores `np.int` in their processes (COLLAB only:
    PROTEINS and D&D have node labels and never reach that line)."""
    folder = scratch / "numpy_alias"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(NUMPY_ALIAS)
    return folder


def authors_split(authors: Path, scratch: Path, sizes: np.ndarray, n_nodes: int,
                  seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Train/val and test ids by the authors' own `DataReader.split_ids_shape` (their checkout)."""
    for p in (str(standin_path(scratch)), str(authors)):
        if p not in sys.path:
            sys.path.insert(0, p)
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        import graphdata  # the authors' module

        reader = graphdata.DataReader.__new__(graphdata.DataReader)
        reader.rnd_state = np.random.RandomState(seed)
        _, _, train_val, test = reader.split_ids_shape(np.arange(len(sizes)), sizes, n_nodes, folds=0)
    return np.sort(train_val), np.sort(test)


def our_split(name: str, folder: Path, n_nodes: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Node counts of every graph and our train/val and test ids (ablate.data.tu)."""
    from ablate.data import tu

    full = tu.read_tu(name, str(folder))
    train_val, test = tu.split_ids(full.num_nodes, n_nodes, seed)
    return full.num_nodes, np.sort(train_val), np.sort(test)


def run_authors(row: str, seed: int, authors: Path, folder: Path, scratch: Path, epochs: int,
                log_dir: Path) -> dict:
    name, n_nodes, cfg, extra = ROWS[row]
    # the published LR timing (ablate's default): their code under today's torch drops at the
    # listed epoch, so it gets m + 1 (SPEC §3; `ablate.trial.fit.scheduler_milestones`)
    decay = ",".join(str(e + 1) for e in (25, 35, 45) if e < epochs) or str(epochs + 1)
    cmd = [sys.executable, "main.py", "-D", "TU", "--seed", str(seed), "--seed_data", str(seed),
           "--n_nodes", str(n_nodes), "--epochs", str(epochs), "--lr_decay_step", decay,
           "-f", "64,64,64", "--readout", "max", "--dropout", "0.1", "--device", "cpu",
           "--results", "None", "--threads", "0", "--cv_folds", "5", "--cv_threads", "1",
           "--data_dir", str(folder)]
    if name == "PROTEINS":
        cmd += ["-K", "1", "--test_batch_size", "100"]
    else:  # D&D and COLLAB: ChebyNet K = 3 (scripts/jobs.txt)
        cmd += ["-K", "3", "--aggregation", "mean", "--n_hidden", "0",
                "--test_batch_size", "32" if name == "COLLAB" else "10"]
    if "weak" in extra:
        skips = "_".join(["skip"] * cfg["pool_layers"][0])  # their pool[3 + p] = the threshold
        init = (["--scale", "None"] if cfg["init_dist"] == "default"
                else ["--init", "normal", "--scale", "1"])
        cmd += ["--pool", f"attn_sup_threshold_{skips}_{cfg['threshold']}", "--pool_arch", "fc_prev",
                "--kl_weight", str(cfg["kl_weight"]), *init]
    paths = [standin_path(scratch)] + ([numpy_alias_path(scratch)] if name == "COLLAB" else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, paths)), "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    t0 = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-v", *cmd] if Path("/usr/bin/time").exists() else cmd,
                          cwd=authors, env=env, capture_output=True, text=True)
    secs = time.perf_counter() - t0
    log = log_dir / f"authors_{row}_seed{seed}_published.log"  # the early-timing logs keep theirs
    log.write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"the authors' main.py failed (exit {proc.returncode}); see {log}")
    tests = re.findall(r"Test set \(epoch (\d+)\).*?Acc metric: (\d+)/(\d+) \(([\d.]+)%\)", proc.stdout)
    trains = re.findall(r"Train set \(epoch (\d+)\).*?Acc metric: (\d+)/(\d+) \(([\d.]+)%\)", proc.stdout)
    epoch, correct, n_test, acc = tests[-1]
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    return {"test_acc": float(acc), "test_correct": int(correct), "n_test": int(n_test),
            "train_acc": float(trains[-1][3]) if trains else None, "epochs": int(epoch),
            "seconds": round(secs, 1), "peak_rss_mb": round(int(rss.group(1)) / 1024) if rss else None,
            "log": str(log)}


def run_ours(row: str, seed: int, folder: Path, epochs: int) -> dict:
    import torch

    from ablate.config import TrialConfig
    from ablate.trial.graph import run_trial

    torch.set_num_threads(1)
    name, n_nodes, cfg, _ = ROWS[row]
    data = dict(path=str(folder.parent), max_train_nodes=n_nodes, split_seed=seed, final=True)
    tc = TrialConfig(study="tu_fidelity", seeds=(seed,), data_params=data, epochs=epochs,
                     loo_auc=False, device="cpu", **cfg)
    t0 = time.perf_counter()
    recs = run_trial(tc)
    secs = time.perf_counter() - t0
    by = {r["split"]: r for r in recs}
    test = by["test_large"]
    return {"test_acc": round(100 * test["accuracy"], 2), "n_test": int(test.get("n_graphs") or 0),
            "train_acc": round(100 * by["train"]["accuracy"], 2) if "train" in by else None,
            "epochs": epochs, "seconds": round(secs, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "status": test.get("status")}


NAMES = {"proteins_global": "PROTEINS, GCN global pool", "proteins_weak": "PROTEINS, GCN weak",
         "dd200_global": "D&D-200, ChebyNet global pool", "dd200_weak": "D&D-200, ChebyNet weak",
         "dd300_global": "D&D-300, ChebyNet global pool", "dd300_weak": "D&D-300, ChebyNet weak",
         "collab_global": "COLLAB, ChebyNet global pool", "collab_weak": "COLLAB, ChebyNet weak",
         "dd200_global_gcn": "D&D-200, GCN global pool (recipe before)",
         "dd300_global_gcn": "D&D-300, GCN global pool (recipe before)"}


def markdown(groups: dict[tuple[str, str], list[float]]) -> None:
    """The doc's table: per row, ours and the authors' code, mean +- std (n) and the seeds."""
    from scipy import stats

    print("| row | ours: mean ± std (n) | the authors' code: mean ± std (n) | Welch p "
          "| seeds, ours / theirs |")
    print("|---|---|---|---|---|")
    for row in NAMES:
        a, b = groups.get((row, "ours"), []), groups.get((row, "authors"), [])
        if not a and not b:
            continue
        cell = lambda v: f"{np.mean(v):.2f} ± {np.std(v):.2f} ({len(v)})" if v else "not run"  # noqa: E731
        p = (f"{stats.ttest_ind(a, b, equal_var=False).pvalue:.2f}"
             if len(a) > 1 and len(b) > 1 else "-")
        seeds = " ".join(f"{x:.1f}" for x in a) + " / " + (" ".join(f"{x:.1f}" for x in b) or "-")
        print(f"| {NAMES[row]} | {cell(a)} | {cell(b)} | {p} | {seeds} |")


def welch_interval(a: list[float], b: list[float], level: float = 0.95) -> tuple[float, float, float, float]:
    """mean(a) - mean(b), its Welch interval at `level` (unequal variances, Welch-Satterthwaite
    degrees of freedom) and Welch's two-sided p."""
    from scipy import stats

    va, vb = np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)
    diff = float(np.mean(a) - np.mean(b))
    se = float(np.sqrt(va + vb))
    if se == 0:
        return diff, diff, diff, (1.0 if diff == 0 else 0.0)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = float(stats.t.ppf(0.5 + level / 2, df)) * se
    return diff, diff - half, diff + half, float(stats.ttest_ind(a, b, equal_var=False).pvalue)


# the published COLLAB figures (SPEC §5): the paper's weakly supervised ChebyNet, the authors'
# notebook's global max pooling before their tuning
COLLAB_PUBLISHED = {"collab_global": "notebook 65.90 ± 3.01", "collab_weak": "paper 66.97"}


def difference_markdown(groups: dict[tuple[str, str], list[float]], rows: list[str]) -> None:
    """Per row: both sides' mean ± std (ddof 1) and seeds, ours - theirs with its 95% Welch
    interval and p, and the published figure."""
    print("| row | ours: mean ± std (n) | the authors' code: mean ± std (n) | ours - theirs "
          "[95% Welch] | Welch p | published |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        a, b = groups.get((row, "ours"), []), groups.get((row, "authors"), [])
        if not a and not b:
            continue
        cell = lambda v: (f"{np.mean(v):.2f} ± {np.std(v, ddof=1):.2f} ({len(v)})" if len(v) > 1  # noqa: E731
                          else f"{v[0]:.2f} (1)" if v else "not run")
        diff = p = "-"
        if len(a) > 1 and len(b) > 1:
            d, lo, hi, pv = welch_interval(a, b)
            diff, p = f"{d:+.2f} [{lo:+.2f}, {hi:+.2f}]", f"{pv:.2f}"
        print(f"| {NAMES[row]} | {cell(a)} | {cell(b)} | {diff} | {p} | "
              f"{COLLAB_PUBLISHED.get(row, '-')} |")


TIMINGS = ("early", "published")  # the LR timings, oldest first (records before issue 41: early)


def done_runs(path: Path) -> set[tuple[str, str, int]]:
    """(row, side, seed) already in `path` with the LR timing this script runs (`published`):
    a rerun skips them; records of an earlier timing are run again, never taken for done."""
    if not path.is_file():
        return set()
    return {(r["row"], r["side"], r["seed"]) for r in map(json.loads, path.read_text().splitlines())
            if r.get("lr_timing", "early") == "published"}


def comparable(rows: list[dict]) -> tuple[list[dict], dict[str, str]]:
    """The records to compare and each row's LR timing: per row, the newest timing both sides
    ran (else the newest any side ran), so no mean mixes timings and no row sets one timing
    against the other; records on other graphs (`same_split` false) left out; a (side, row,
    seed, timing) recorded twice (a rerun) counts once, with its last record."""
    rows = [r for r in rows if r.get("same_split") is not False]
    newest = {(r["side"], r["row"], r["seed"], r.get("lr_timing", "early")): r for r in rows}
    rows = list(newest.values())  # one record per (side, row, seed, timing): a rerun's, the last
    timing: dict[str, str] = {}
    for row in {r["row"] for r in rows}:
        sides: dict[str, set[str]] = {}
        for r in rows:
            if r["row"] == row:
                sides.setdefault(r["side"], set()).add(r.get("lr_timing", "early"))
        both = set.intersection(*sides.values())
        timing[row] = max(both or set.union(*sides.values()), key=TIMINGS.index)
    return [r for r in rows if r.get("lr_timing", "early") == timing[r["row"]]], timing


def summary(path: Path, as_markdown: bool = False) -> None:
    from scipy import stats

    rows, _ = comparable([json.loads(line) for line in path.read_text().splitlines() if line.strip()])
    groups: dict[tuple[str, str], list[float]] = {}
    for r in sorted(rows, key=lambda r: r["seed"]):
        groups.setdefault((r["row"], r["side"]), []).append(r["test_acc"])
    if as_markdown:
        markdown(groups)
        return
    print(f"{'row':16s} {'side':8s} {'n':>3s} {'mean':>7s} {'std':>6s}  seeds")
    for (row, side), accs in sorted(groups.items()):
        print(f"{row:16s} {side:8s} {len(accs):3d} {np.mean(accs):7.2f} {np.std(accs):6.2f}  "
              + " ".join(f"{a:.1f}" for a in accs))
    print("\ntwo-sample tests, ours vs the authors' code (p-values)")
    for row in sorted({r for r, _ in groups}):
        a, b = groups.get((row, "ours")), groups.get((row, "authors"))
        if not a or not b or len(a) < 2 or len(b) < 2:
            continue
        t = stats.ttest_ind(a, b, equal_var=False)
        less = stats.mannwhitneyu(a, b, alternative="less").pvalue
        greater = stats.mannwhitneyu(a, b, alternative="greater").pvalue
        print(f"{row:16s} Welch t={t.statistic:+.2f} p={t.pvalue:.3f}; Mann-Whitney ours<authors "
              f"p={less:.3f}, ours>authors p={greater:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--authors", type=Path, help="checkout of bknyaz/graph_attention_pool")
    ap.add_argument("--zips", type=Path, default=FIXTURES, help="folder with PROTEINS.zip, DD.zip")
    ap.add_argument("--rows", default="proteins_global,proteins_weak")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--side", choices=["authors", "ours", "both"], default="both")
    ap.add_argument("--epochs", type=int, default=50)
    ap.add_argument("--scratch", type=Path, default=Path(tempfile.gettempdir()) / "tu_fidelity")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "tu_fidelity.jsonl")
    ap.add_argument("--summary", action="store_true", help="print the table of --out and exit")
    ap.add_argument("--markdown", action="store_true", help="with --summary: the doc's table")
    args = ap.parse_args()
    if args.summary:
        summary(args.out, args.markdown)
        return
    if args.side != "ours" and (args.authors is None or not (args.authors / "main.py").is_file()):
        ap.error("--authors must name a checkout of bknyaz/graph_attention_pool (main.py)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    log_dir = args.out.parent / "logs"
    log_dir.mkdir(exist_ok=True)
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                         text=True).stdout.strip()
    from ablate.trial.provenance import tree_state

    dirty = tree_state(str(ROOT))  # ablate's one rule: '' clean, else 'dirty:' + the diff's hash
    from benchmarks.suite_time import machine

    cpu = machine()  # CPU model, vector unit, torch version
    authors_commit = None
    if args.authors is not None:
        authors_commit = subprocess.run(["git", "-C", str(args.authors), "rev-parse", "HEAD"],
                                        capture_output=True, text=True).stdout.strip() or None
    sides = ["authors", "ours"] if args.side == "both" else [args.side]
    done = done_runs(args.out)
    for row in args.rows.split(","):
        name, n_nodes, _, _ = ROWS[row]
        folder = unzip(name, args.zips, args.scratch)
        for seed in (int(s) for s in args.seeds.split(",")):
            sizes, ours_tv, ours_test = our_split(name, folder, n_nodes, seed)
            same = None
            if args.authors is not None:
                theirs_tv, theirs_test = authors_split(args.authors, args.scratch, sizes, n_nodes, seed)
                same = bool(np.array_equal(theirs_tv, ours_tv) and np.array_equal(theirs_test, ours_test))
                if not same:  # a side-by-side on other graphs compares nothing
                    sys.exit(f"error: {name} seed {seed}: our split differs from the authors' "
                             "(ablate.data.tu.split_ids against their DataReader): not run")
            for side in sides:
                if (row, side, seed) in done and args.epochs == 50:
                    continue
                res = (run_authors(row, seed, args.authors, folder, args.scratch, args.epochs, log_dir)
                       if side == "authors" else run_ours(row, seed, folder, args.epochs))
                rec = {"row": row, "side": side, "seed": seed, "n_train": len(ours_tv),
                       "same_split": same, **res, "git_sha": sha, "git_dirty": dirty,
                       "authors_commit": authors_commit if side == "authors" else None,
                       "lr_timing": "published",
                       # the machine's 1-minute load at the run's end: above its cores, other
                       # work shared them and `seconds` is not a one-core cost
                       "load_1min": round(os.getloadavg()[0], 2),
                       "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
                       # float rounding, and so a trained model's digits, follow the vector unit
                       # torch's kernels use (AVX2 and AVX-512 give different COLLAB weak runs)
                       **{k: cpu[k] for k in ("cpu", "vector", "torch") if k in cpu},
                       "command": " ".join(sys.argv)}
                with open(args.out, "a") as f:
                    f.write(json.dumps(rec) + "\n")
                print(json.dumps({k: rec[k] for k in ("row", "side", "seed", "test_acc", "train_acc",
                                                      "seconds", "peak_rss_mb", "same_split")}), flush=True)


if __name__ == "__main__":
    main()
