"""Adam's cost per step for the packed TRIANGLES model: capturable foreach vs fused.

    python benchmarks/bench_adam.py                  # CUDA if present, else the CPU
    python benchmarks/bench_adam.py --device cpu --seeds 1,8,64

For each pack size S it builds the TRIANGLES ChebyGIN supervised pack's trainable
parameters (`ablate.trial.pack_step.PackStep`, as the replayed step holds them), gives them
random gradients, and profiles `optimizer.step()` (after a first step that creates Adam's
state) for `Adam(capturable=True, foreach=True)`, what the replayed step used before
(capturable on CUDA only: torch refuses it on a CPU, where the row is plain foreach), and
`Adam(capturable=True, fused=True)`, what it uses now. Columns, medians over --repeats:

- ops: operator calls the optimiser makes per step (aten events with none above them);
  on CUDA each is one kernel launch or, for a `_foreach_*` op, one per chunk of tensors,
  so on a CPU this counts about the launches a CUDA step would make;
- kernels: CUDA kernels per step (CUDA only);
- ms: wall time per step.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def _params(S: int, device: torch.device) -> tuple[list[torch.Tensor], dict]:
    """The pack's trainable parameters and its optimiser's betas and weight decay."""
    from ablate.config import TrialConfig, resolve
    from ablate.data import load_graphsets
    from ablate.trial import packed
    from ablate.trial.batches import TrainBatches
    from ablate.trial.pack_step import PackStep

    cfg = resolve(TrialConfig(dataset="triangles", supervision="sup", seeds=tuple(range(S)),
                              data_params=(("n_train", 64), ("n_val", 8), ("n_test", 8))))
    splits = load_graphsets(cfg.dataset, **cfg.data_kwargs)
    train = TrainBatches(splits["train"], device)
    stack = packed.MemberStack([packed.Member(cfg, s) for s in cfg.seeds],
                               splits["train"].num_features, 1, device)
    ps = PackStep(stack, train, cfg, device, replay=True)
    d = ps.opt.defaults
    return list(ps.train_p.values()), {"betas": d["betas"], "weight_decay": d["weight_decay"]}


def _top_ops(prof) -> int:
    """Operator calls made by the optimiser itself (an aten event with no aten event above
    it): a `_foreach_*` call is one (a multi-tensor kernel per chunk of tensors on CUDA,
    a loop of per-tensor ops on a CPU), fused Adam's `_fused_adam_` is one."""
    evs = [e for e in prof.events() if e.name.startswith("aten::")]

    def top(e) -> bool:
        p = e.cpu_parent
        while p is not None:
            if p.name.startswith("aten::"):
                return False
            p = p.cpu_parent
        return True

    return sum(1 for e in evs if top(e))


def measure(kind: str, params: list[torch.Tensor], hyper: dict, device: torch.device,
            repeats: int) -> tuple[float, float, float]:
    """(ops, kernels, ms) per `optimizer.step()` of Adam `kind` ("foreach" or "fused")."""
    from torch.profiler import ProfilerActivity, profile

    ps = [p.detach().clone().requires_grad_() for p in params]
    for p in ps:
        p.grad = torch.randn_like(p)
    # torch's foreach Adam is capturable on CUDA only: on a CPU its row is the plain foreach
    # step (the capturable one adds a few step-count ops on top)
    cap = kind == "fused" or device.type == "cuda"
    lr = torch.tensor(1e-3, device=device) if cap else 1e-3
    opt = torch.optim.Adam(ps, lr=lr, capturable=cap, **hyper, **{kind: True})
    opt.step()  # state created
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    ops, kernels, ms = [], [], []
    for _ in range(repeats):
        with profile(activities=acts) as prof:
            opt.step()
            if device.type == "cuda":
                torch.cuda.synchronize()
        ops.append(_top_ops(prof))
        kernels.append(sum(1 for e in prof.events()
                           if e.device_type == torch.autograd.DeviceType.CUDA)
                       if device.type == "cuda" else float("nan"))
        t0 = time.perf_counter()
        for _ in range(10):
            opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        ms.append((time.perf_counter() - t0) * 100)
    return statistics.median(ops), statistics.median(kernels), statistics.median(ms)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--seeds", default="1,8,64", help="pack sizes")
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    dev = a.device if a.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(dev)
    torch.set_num_threads(1)
    print(f"device {device}, torch {torch.__version__}")
    print(f"{'S':>4} {'tensors':>8} | {'foreach ops':>11} {'kernels':>8} {'ms':>7} | "
          f"{'fused ops':>9} {'kernels':>8} {'ms':>7}")
    for S in (int(s) for s in a.seeds.split(",")):
        params, hyper = _params(S, device)
        f, u = (measure(kind, params, hyper, device, a.repeats) for kind in ("foreach", "fused"))
        print(f"{S:>4} {len(params):>8} | {f[0]:>11.0f} {f[1]:>8.0f} {f[2]:>7.2f} | "
              f"{u[0]:>9.0f} {u[1]:>8.0f} {u[2]:>7.2f}")


if __name__ == "__main__":
    main()
