"""A graph trial kind for the memory-scheduling test, imported by Ray workers (PYTHONPATH).

`held_trial` runs the graph trainer, records the memory Ray assigned to its worker
(``assigned_memory``) and then holds its worker for ``+hold`` seconds, so that trials
Ray allowed to run together overlap in time.
"""

from __future__ import annotations

import time


def held_trial(cfg):
    import ray

    import ablate.trial.graph as graph

    res = graph.run_trial_full(cfg)
    assigned = ray.get_runtime_context().get_assigned_resources()
    for r in res.records:
        r["assigned_memory"] = float(assigned.get("memory", 0.0))
    time.sleep(float(dict(cfg.extra).get("hold", 0)))
    return res


def _kind():
    from _ray_kinds import _FunctionKind

    kind = _FunctionKind("memheld", held_trial)
    kind.store_columns = (("note", "string"), ("assigned_memory", "double"))
    return kind


HELD = _kind()
