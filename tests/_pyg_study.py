"""The tiny study file the `dataset=pyg` end-to-end tests run (a user's class, OGB's class):
global pooling against weak attention, ChebyGIN, 2 epochs, 2 seeds as one pack."""

from __future__ import annotations


def pyg_study(description: str, data: str) -> str:
    """A study file's text: `data` is its YAML lines for the data set (`data:`, `grid:`)."""
    return (f"description: {description}\n"
            "fixed: {dataset: pyg, backbone: chebygin, epochs: 2}\n"
            f"{data.rstrip()}\n"
            "variants:\n"
            "  - {pool_layers: []}\n"
            "  - {pool_layers: [2], supervision: weak, threshold: 0.001, kl_weight: 1.0}\n"
            'seeds: "range(0,2)"\n'
            "seeds_per_trial: 2\n"
            "max_failures: 0\n")
