"""The authors' side of `benchmarks/mnist_train_reference.py`: their MNIST-75SP data files
written from our graphs, their `main.py` command line (the flags of `scripts/mnist_75sp.sh`),
runs of it in resumable chunks (each resumed from the previous chunk's checkpoint, exactly
with the adapter of `authors_resume.py`) and the parsing of their logs. Their code is a
checkout the user fetches (bknyaz/graph_attention_pool); nothing of it is copied here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

_spec = importlib.util.spec_from_file_location("tu_fidelity", Path(__file__).with_name("tu_fidelity.py"))
_tu = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_tu)
_spec = importlib.util.spec_from_file_location("authors_resume",
                                               Path(__file__).with_name("authors_resume.py"))
_resume = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_resume)

N_PAD = 75  # MNIST-75SP: at most 75 superpixels (their noise tensors are (n, 75))
AUTHORS_FLAGS = ["-D", "mnist-75sp", "--test_batch_size", "100", "-K", "4", "-f", "4,64,512",
                 "--aggregation", "mean", "--n_hidden", "0", "--readout", "max", "--dropout", "0.5",
                 "--threads", "0", "--img_features", "mean,coord", "--img_noise_levels", "0.4,0.6",
                 "--pool_arch", "fc_prev", "--kl_weight", "100"]
ROWS = {"sup": ["--pool", "attn_sup_threshold_skip_skip_0.01"], "global": []}


def write_authors_data(raw: dict, folder: Path, n_train: int | None) -> None:
    """Their `MNIST75sp` files: (labels, [(intensity (N, 1), centre (N, 2) in pixels, order)])."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        gs = raw[split]
        count = len(gs) if split == "test" or not n_train else min(n_train, len(gs))
        data = []
        for i in range(count):
            a, b = gs.node_ptr[i], gs.node_ptr[i + 1]
            data.append((gs.x[a:b, :1].copy(), (gs.coord[a:b] * 28).astype(np.float32),
                         np.arange(b - a)))
        with open(folder / f"mnist_75sp_{split}.pkl", "wb") as f:
            pickle.dump((gs.y[:count].astype(np.int32), data), f, protocol=4)
    gs = raw["test"]
    noise = np.zeros((len(gs), N_PAD), np.float32)
    noise_c = np.zeros((len(gs), N_PAD, 3), np.float32)
    for i in range(len(gs)):
        a, b = gs.node_ptr[i], gs.node_ptr[i + 1]
        noise[i, :b - a] = raw["noise"][a:b, 0]
        noise_c[i, :b - a] = raw["noise_c"][a:b]
    torch.save(torch.from_numpy(noise), folder / "mnist_75sp_noise.pt")
    torch.save(torch.from_numpy(noise_c), folder / "mnist_75sp_color_noise.pt")
    (folder / "READY").write_text("ok\n")


def authors_steps(decay: list[int], timing: str) -> list[int]:
    """The `--lr_decay_step` their main.py gets for the listed drops `decay` under today's
    torch: `published` (the timing of their published runs, SPEC §3: a drop listed at m applies
    from epoch m + 1, which today's torch gives for m + 1) or `today` (their code as it runs
    now: from epoch m)."""
    return [m + 1 for m in decay] if timing == "published" else list(decay)


def authors_cmd(row: str, seed: int, epochs: int, steps: list[int], folder: Path,
                every_epoch: bool = False, results: Path | None = None,
                resume: Path | None = None) -> list[str]:
    """Their main.py for `epochs` epochs (the end of a chunk when resuming from `resume`);
    `steps` are passed as given (a scheduler restored from a checkpoint keeps its own)."""
    return [sys.executable, "main.py", *AUTHORS_FLAGS, *ROWS[row], "--epochs", str(epochs),
            "--lr_decay_step", ",".join(str(e) for e in steps), "--seed", str(seed),
            "--device", "cpu", *(["--debug"] if every_epoch else []),
            "--results", str(results) if results else "None", "-d", str(folder),
            *(["--resume", str(resume)] if resume else [])]


def parse_authors(log: str) -> dict[int, list[float]]:
    """epoch -> [TEST, NOISY, NOISY-C] accuracy (%) from their log (three test lines an epoch)."""
    out: dict[int, list[float]] = {}
    for epoch, acc in re.findall(r"Test set \(epoch (\d+)\): Avg loss.*?\(([\d.]+)%\)", log):
        out.setdefault(int(epoch), []).append(float(acc))
    return {e: v for e, v in out.items() if len(v) == 3}


def start_authors(cmd: list[str], authors: Path, log: Path,
                  exact: bool = False) -> tuple[subprocess.Popen, Path, float]:
    """Their main.py with the stand-in torchvision and, with `exact`, the exact-resume adapter
    (`authors_resume.py`) on its PYTHONPATH; ABLATE_PROBE=1 in this environment reaches it too."""
    paths = [_resume.adapter_path(log.parent), _tu.standin_path(log.parent)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(x) for x in paths),
           "ABLATE_EXACT_RESUME": "1" if exact else "0", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore",
           # their checkpoints pickle argparse's Namespace: today's torch.load refuses it unless asked
           "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
    timed = ["/usr/bin/time", "-v", *cmd] if Path("/usr/bin/time").exists() else cmd
    f = open(log, "w")
    f.write(" ".join(cmd) + "\n")
    f.flush()
    proc = subprocess.Popen(timed, cwd=authors, env=env, stdout=f, stderr=subprocess.STDOUT)
    return proc, log, time.perf_counter()


def run_authors_chunked(row: str, seed: int, epochs: int, steps: list[int], chunk: int,
                        authors: Path, folder: Path, work: Path, state: Path,
                        every_epoch: bool = False, exact: bool = False,
                        provenance: dict | None = None) -> dict:
    """Their main.py in chunks of `chunk` epochs, each resumed from the previous chunk's
    checkpoint (their `--resume`: model, optimiser and scheduler state) and tested at its end.
    `state` (a folder) holds progress.json and the last checkpoint, so a stopped run resumes at
    its last finished chunk. Their code reseeds at every start: without `exact` each chunk
    replays the first chunk's data order and dropout masks; with `exact` the adapter of
    `authors_resume.py` carries torch's generator state across the chunks, so the run trains
    as one uninterrupted run (not with `every_epoch`: their --debug tests between epochs and
    so draws from the generator where a chunk's end does not). Each chunk's entry names the
    commit and tree state of the process that ran it (`provenance`: git_sha, git_dirty)."""
    if exact and every_epoch:
        raise ValueError("exact resume and --every-epoch: their --debug draws test-loader seeds "
                         "after every epoch, which a chunk's end does in another order")
    state, work = state.resolve(), work.resolve()  # their main.py runs in their checkout
    state.mkdir(parents=True, exist_ok=True)
    prog_path = state / "progress.json"
    prog = json.loads(prog_path.read_text()) if prog_path.exists() else {
        "done": 0, "curve": {}, "seconds": 0.0, "peak_rss_mb": 0, "chunks": []}
    results = work / f"checkpoints_{state.name}"
    results.mkdir(parents=True, exist_ok=True)
    while prog["done"] < epochs:
        end = min(prog["done"] + chunk, epochs)
        resume = state / f"checkpoint_epoch{prog['done']}.pth.tar" if prog["done"] else None
        cmd = authors_cmd(row, seed, end, steps, folder, every_epoch, results, resume)
        log = work / f"authors_{state.name}_epochs{prog['done'] + 1}-{end}.log"
        proc, log, t0 = start_authors(cmd, authors, log, exact)
        got = finish_authors(proc, log, t0)
        saved = sorted(results.glob(f"checkpoint_*_epoch{end}_seed{seed:07d}.pth.tar"))
        if not saved:
            raise RuntimeError(f"their main.py saved no checkpoint of epoch {end}; see {log}")
        rng = Path(f"{saved[-1]}.rng.pt")
        if exact and not rng.exists():
            raise RuntimeError(f"the exact-resume adapter saved no generator state; see {log}")
        if exact:
            os.replace(rng, state / f"checkpoint_epoch{end}.pth.tar.rng.pt")
        os.replace(saved[-1], state / f"checkpoint_epoch{end}.pth.tar")
        if resume is not None:
            resume.unlink()
            Path(f"{resume}.rng.pt").unlink(missing_ok=True)
        prog["curve"].update({str(k): v for k, v in got["epochs"].items()})
        prog["seconds"] = round(prog["seconds"] + got["seconds"], 1)
        prog["peak_rss_mb"] = max(prog["peak_rss_mb"], got["peak_rss_mb"] or 0)
        prog["chunks"].append({"epochs": [prog["done"] + 1, end], "seconds": got["seconds"],
                               "log": log.name, "train": train_lines(log.read_text()),
                               **(provenance or {})})
        prog["done"] = end
        tmp = prog_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(prog, indent=1) + "\n")
        os.replace(tmp, prog_path)
        print(f"  authors {row} seed {seed}: epochs to {end} done ({got['seconds']:.0f} s): "
              + json.dumps({k: v for k, v in got["epochs"].items()}), flush=True)
    return prog


def train_lines(log: str) -> dict[str, list[float]]:
    """epoch -> [average training loss, accuracy %] of their log's last line of each epoch."""
    out = {}
    for epoch, loss, acc in re.findall(
            r"Train set \(epoch (\d+)\): \[\d+/\d+ \(100%\)\].*?\(avg: ([\d.]+)\).*?\(([\d.]+)%\)", log):
        out[epoch] = [float(loss), float(acc)]
    return out


def finish_authors(proc: subprocess.Popen, log: Path, t0: float) -> dict:
    rc = proc.wait()
    secs = time.perf_counter() - t0
    if rc != 0:
        raise RuntimeError(f"the authors' main.py failed (exit {rc}); see {log}")
    return {**read_authors_log(log), "seconds": round(secs, 1)}


def read_authors_log(log: Path) -> dict:
    """The curve, wall time and peak memory of one finished run of their main.py (its log)."""
    text = log.read_text()
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text)
    secs = None
    if wall:
        parts = [float(p) for p in wall.group(1).split(":")]
        secs = round(sum(p * 60 ** i for i, p in enumerate(reversed(parts))), 1)
    return {"epochs": parse_authors(text), "seconds": secs,
            "peak_rss_mb": round(int(rss.group(1)) / 1024) if rss else None, "log": str(log)}
