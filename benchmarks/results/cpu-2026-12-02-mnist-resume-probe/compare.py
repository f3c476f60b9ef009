"""The probe's three runs side by side: every shuffled order's start and the generator digest at
each epoch's train() (from each run's logs), and whether its epoch-2 weights equal one run's."""
import json
import re
import sys
from pathlib import Path

import torch

state = Path(sys.argv[1])
here = Path(__file__).parent
out, weights = {}, {}
for d in sorted(state.iterdir()):
    text = "".join(p.read_text() for p in sorted(here.glob(f"authors_{d.name}_epochs*.log")))
    out[d.name] = {
        "shuffled_orders_in_log_order": [json.loads(o) for o in
                                         re.findall(r"probe: shuffled order starts (\[.*?\])", text)],
        "generator_at_train": dict(re.findall(r"probe: epoch (\d+) generator at train\(\) (\w+)", text))}
    weights[d.name] = torch.load(d / "checkpoint_epoch2.pth.tar", weights_only=False)["state_dict"]
ref = weights[next(k for k in out if k.endswith("_c2_seed0"))]  # one run of 2 epochs
for k, w in weights.items():
    out[k]["epoch2_weights_equal_one_run"] = all(torch.equal(w[n], ref[n]) for n in ref)
print(json.dumps(out, indent=1))
