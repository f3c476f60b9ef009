"""The report's "beside the paper's" table on MNIST-75SP (issue 26 item 6).

The paper's clean MNIST-75SP figures come from its workshop version, which the authors' final
code does not reproduce; their logs of that code (SPEC §5, one seed, 111) are shown as a
source of their own, with the final version's TEST-NOISY mean and the workshop's TEST-ORIG.
A store made with the reference's recipe (`final`, the authors' SLIC) is not marked as a
different recipe; one made with today's SLIC is.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from analysis.reference import LOG_SOURCE, follows_reference, logged, reference
from analysis.report import write_report
from analysis.synthetic import trial_record, write_trials
from analysis.tables import reaches

ROW = "ChebyGIN (ref. script) sup"


def _store(root, data_params: dict) -> None:
    rows = [trial_record(trial_id=f"sup{s}", seed=s, seeds=str(s), split=split,
                         dataset="mnist_sp", data_params=json.dumps(data_params),
                         backbone="chebygin_ref", K=4, filters="4,64,512", readout="max",
                         pool_layers="2", supervision="sup", threshold=0.01,
                         accuracy=acc + 0.002 * s, attn_auc_l0=0.99)
            for s in range(5)
            for split, acc in (("val", 0.95), ("test_orig", 0.95), ("test_noisy", 0.88),
                               ("test_noisyc", 0.9))]
    write_trials(root, "mnist", rows)


@pytest.mark.parametrize("slic", ["v0.15", "v0.19"])
def test_mnist_rows_stand_beside_the_paper_and_the_authors_logs(tmp_path, slic):
    _store(tmp_path / "res", {"final": True, "slic": slic})
    write_report(tmp_path / "res", tmp_path / "out", figures=False)
    df = pd.read_csv(tmp_path / "out" / "tables" / "mnist__paper.csv")
    got = {(r.column, r.paper_source): r.paper for r in df[df["row"] == ROW].itertuples()}
    assert got == {("test_orig", "workshop"): 99.03, ("test_orig", LOG_SOURCE): 95.67,
                   ("test_noisy", "final"): 92.3, ("test_noisy", LOG_SOURCE): 90.31,
                   ("test_noisyc", LOG_SOURCE): 92.72, ("auc", "workshop"): 97.9,
                   ("auc", LOG_SOURCE): 99.96}
    line = df[(df["column"] == "test_noisy") & (df["paper_source"] == LOG_SOURCE)].iloc[0]
    assert line["mean"] == pytest.approx(88.4) and line["diff_paper"] == pytest.approx(-1.91)
    md = (tmp_path / "out" / "tables" / "mnist__paper.md").read_text()
    assert f"{LOG_SOURCE}: the MNIST-75SP logs of the authors' final code" in md
    # NOISY 88.0-88.8 over five seeds: the paper's 92.3 is not reached, and the table says so
    noisy = [ln for ln in md.splitlines() if "| 92.3 ± 0.4 |" in ln]
    assert len(noisy) == 1 and "| no: ours below |" in noisy[0], noisy
    assert ("MNIST-75SP †" in md) == (slic == "v0.19")  # today's SLIC: not the reference's data


def test_logged_numbers_and_reference_recipe():
    assert logged("ChebyGIN (ref. script) global pool", "mnist_sp", "test_noisyc").mean == 87.01
    assert logged("ChebyGIN (ref. script) weak", "mnist_sp", "auc").source == LOG_SOURCE
    assert logged("ChebyGIN sup", "mnist_sp", "test_orig") is None  # sum + MLP: another recipe
    assert logged("ChebyGIN (ref. script) sup", "colors", "test_orig") is None
    assert reference("ChebyGIN (ref. script) sup", "mnist_sp", "test_noisyc") is None
    assert follows_reference({"final": True, "gt": "any"}) and follows_reference({})
    assert not follows_reference({"n_train": 100})
    assert not follows_reference({"final": True, "noise": "nodes"})


def test_reaches_says_where_the_published_mean_lies():
    assert reaches(92.3, 91.0, 93.0) == "yes"
    assert reaches(92.3, 85.0, 90.0) == "no: ours below"
    assert reaches(80.0, 85.0, 90.0) == "no: ours above"
    assert reaches(92.3, float("nan"), float("nan")) == "too few runs"
