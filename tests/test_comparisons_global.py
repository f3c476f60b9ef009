"""Rows with attention that no one-axis neighbour reaches are compared with their global-pool
row (the TU studies' weak rows: the paper's question of them), and no other study changes."""

from __future__ import annotations

from ablate.runner.plan.adaptive import plan_rows
from ablate.runner.study.expand import build_study


def _comparisons(name: str) -> set[tuple[str, str, str]]:
    study, _ = build_study(name)
    return set(plan_rows(study.trials).comparisons)


def test_the_tu_studys_weak_rows_are_compared_with_global_pooling():
    comps = _comparisons("tu")
    weak = {(r, b, a) for r, b, a in comps if " weak" in r}
    assert weak == {
        ("GCN weak (data.max_train_nodes=default)",
         "GCN global pool (data.max_train_nodes=default)", "pool_layers"),
        ("ChebyNet weak (data.max_train_nodes=default)",
         "ChebyNet global pool (data.max_train_nodes=default)", "pool_layers"),
        ("ChebyNet weak (data.max_train_nodes=300)",
         "ChebyNet global pool (data.max_train_nodes=300)", "pool_layers"),
    }


def test_a_row_with_a_one_axis_neighbour_keeps_it_and_gains_nothing():
    comps = _comparisons("supervision")
    assert len(comps) == 13
    for sup in ("sup", "weak"):  # compared with unsup along supervision, not with global pool
        rows = {(b, a) for r, b, a in comps if r == f"GIN {sup}"}
        assert rows == {("GIN unsup", "supervision")}, rows
    beyond = _comparisons("tu_beyond")  # the weak rows reach the unsup rows along supervision
    assert ("ChebyGIN weak", "ChebyGIN unsup", "supervision") in beyond
    assert not any(r.endswith("weak") and a == "pool_layers" for r, _, a in beyond)


def test_the_paper_studys_top_k_row_is_compared_with_its_global_pool():
    assert ("GIN unsup top-k", "GIN global pool", "pool_layers") in _comparisons("paper")
