"""The Python examples of docs/*.md run as written (README.md's is run in
tests/test_docs_examples.py): the analysis ones on stores with known values in a folder of
their own, the training ones (`slow`: tens of seconds) on the data they name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from analysis.synthetic import trial_record, write_trials

ROOT = Path(__file__).resolve().parent.parent
# the blocks each doc holds, so a new one is not left unrun
# (usage.md's second is a user's layer, `mylayers.py`: tests/test_docs_examples.py writes it
# beside the commands that name it, tests/test_dense_layers.py trains it)
BLOCKS = {"docs/analysis.md": 2, "docs/runner.md": 1, "docs/sdc.md": 1, "docs/usage.md": 2}


def python_blocks(name: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", (ROOT / name).read_text(encoding="utf-8"),
                      re.M | re.S)


def _run(code: str, where: str) -> dict:
    scope: dict = {"__name__": "__docs__"}
    exec(compile(code, where, "exec"), scope)  # noqa: S102 - the docs' own example
    return scope


def _store(root: Path, study: str, dataset: str) -> None:
    rows = [trial_record(trial_id=f"t{pool or 'g'}", seed=s, split=split, dataset=dataset,
                         pool_layers=pool, seeds="0,1,2", accuracy=0.6 + 0.1 * s + (0.05 if pool else 0))
            for pool in ("", "1") for s in range(3) for split in ("val", "test_orig")]
    write_trials(root, study, rows)


def test_every_doc_with_python_holds_the_blocks_run_here():
    found = {f"docs/{p.name}": len(python_blocks(f"docs/{p.name}"))
             for p in sorted((ROOT / "docs").glob("*.md"))}
    assert {k: v for k, v in found.items() if v} == BLOCKS


def test_the_analysis_examples_run_on_a_store(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _store(tmp_path / "results", "init", "colors")
    scope = _run(python_blocks("docs/analysis.md")[1], "docs/analysis.md")
    assert [s.name for s in scope["studies"]] == ["init"] and set(scope["summary"]) == {"init"}
    assert (tmp_path / "report" / "report.html").is_file()
    df = _run(python_blocks("docs/runner.md")[0], "docs/runner.md")["df"]
    assert len(df) == 12 and set(df["study"]) == {"init"}


def test_the_section_example_adds_its_table_to_the_report(tmp_path):
    from analysis.report import write_report
    from analysis.sections import SECTIONS

    _store(tmp_path / "results", "mine", "my_colors")
    try:
        _run(python_blocks("docs/analysis.md")[0], "docs/analysis.md")
        summary = write_report(tmp_path / "results", tmp_path / "report", figures=False)
    finally:
        SECTIONS.pop("my_study", None)
    text = (tmp_path / "report" / "report.md").read_text()
    assert "### My study" in text and "| ChebyGIN unsup | 0.750 | 6 |" in text
    assert "highest mean: ChebyGIN unsup" in summary["mine"]["findings"]
    assert (tmp_path / "report" / "tables" / "mine__my_means.csv").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("doc", ["docs/usage.md", "docs/sdc.md"])
def test_the_training_examples_run(doc, tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    scope = _run(python_blocks(doc)[0], doc)
    if doc == "docs/usage.md":
        assert {r["split"] for r in scope["records"]} == {"val", "test_orig", "test_large",
                                                          "test_largec"}
        assert len(scope["results"]) == 2 and all(r.records for r in scope["results"])
    else:
        assert len(scope["res"].records) == 6 and scope["res"].curves
