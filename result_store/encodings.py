"""One value of a nested column (per-size accuracies, GT-mass curve) in its declared form.

The declared schema (`result_store.schema`) stores ``acc_by_size`` and ``gt_mass_curve`` as
lists of structs; files written before it (version 0, `result_store.legacy`) hold them as JSON
text (a list of ``[lo, hi, accuracy, graphs]``; an object ``{"0.05": fraction, ...}``).
`native_value` turns either form into the declared one. It lives below both modules, so the
writer's schema and the reader's conversion share it without importing each other.
"""

from __future__ import annotations

import json
import math


def native_value(name: str, value: object) -> object:
    """One value of nested column `name` in its declared Python form (list of dicts), from
    that form or a version-0 encoding (JSON text, lists, a threshold -> fraction dict).
    Raises ValueError for text that is not JSON."""
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, str):
        value = json.loads(value) if value.strip() else None
    if value is None:
        return None
    if name == "acc_by_size":
        return [b if isinstance(b, dict) else
                {"lo": int(b[0]), "hi": int(b[1]), "accuracy": _num(b[2]), "graphs": int(b[3])}
                for b in value]
    if name == "gt_mass_curve":
        if isinstance(value, dict):
            value = [{"t": float(t), "fraction": _num(f)}
                     for t, f in sorted(value.items(), key=lambda kv: float(kv[0]))]
        return value or None  # {} (no attention) -> null
    return value


def _num(x: object) -> float:
    return math.nan if x is None else float(x)
