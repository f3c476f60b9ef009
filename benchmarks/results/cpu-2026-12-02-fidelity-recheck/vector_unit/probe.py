"""Run tu_fidelity's ours-side collab_weak seed S via the checkout on PYTHONPATH; print full-precision records."""
import sys, json, importlib.util, time
from pathlib import Path
root = Path(sys.argv[1]); seed = int(sys.argv[2]); row = sys.argv[3] if len(sys.argv) > 3 else "collab_weak"
sys.argv = [sys.argv[0]]
spec = importlib.util.spec_from_file_location("tf", root / "benchmarks/tu_fidelity.py")
tf = importlib.util.module_from_spec(spec); spec.loader.exec_module(tf)
import torch
from ablate.config import TrialConfig
from ablate.trial.graph import run_trial
torch.set_num_threads(1)
name, n_nodes, cfg, _ = tf.ROWS[row]
data = dict(path="/tmp/tu_fidelity", max_train_nodes=n_nodes, split_seed=seed, final=True)
tc = TrialConfig(study="tu_fidelity", seeds=(seed,), data_params=data, epochs=50, loo_auc=False, device="cpu", **cfg)
t = time.time()
recs = run_trial(tc)
for r in recs:
    print(json.dumps({k: r.get(k) for k in ("split", "accuracy", "loss", "n_graphs", "status") if k in r}))
print("secs", round(time.time() - t, 1))
