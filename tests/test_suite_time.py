"""benchmarks/suite_time.py: the record behind the README's figure for the suite's time."""

from __future__ import annotations

from pathlib import Path

from _bench import benchmark

ROOT = Path(__file__).resolve().parents[1]
suite_time = benchmark("suite_time")


def test_counts_read_pytests_closing_line():
    out = "....F\n=== short test summary info ===\nFAILED tests/x.py::t\n" \
          "1 failed, 962 passed, 63 skipped, 55 deselected, 2 warnings in 281.23s (0:04:41)\n"
    assert suite_time.counts(out) == {"failed": 1, "passed": 962, "skipped": 63,
                                      "deselected": 55, "warning": 2}
    assert suite_time.counts("3 passed, 1 error in 2.0s") == {"passed": 3, "error": 1}
    assert suite_time.counts("ImportError while loading conftest") == {}


def test_a_suite_is_timed_counted_and_its_log_kept(tmp_path, monkeypatch):
    tests = tmp_path / "test_tiny.py"
    tests.write_text("import pytest\n\ndef test_a():\n    pass\n\ndef test_b():\n    assert 0\n\n"
                     "@pytest.mark.skip\ndef test_c():\n    pass\n")
    monkeypatch.setitem(suite_time.SUITES, "tiny", [str(tests), "-p", "no:cacheprovider"])
    rec = suite_time.run_suite("tiny", tmp_path)
    assert rec["exit"] == 1 and rec["counts"] == {"passed": 1, "failed": 1, "skipped": 1}
    assert rec["wall_s"] > 0 and len(rec["load_before"]) == 3
    assert "test_b" in (tmp_path / rec["log"]).read_text()


def test_the_machine_word_names_the_gpu_else_cpu():
    assert suite_time.label({"gpu": "NVIDIA H100 80GB HBM3"}) == "h100"
    assert suite_time.label({"cpu": "Intel Xeon"}) == "cpu"
    assert suite_time.machine()["vector"] in ("avx512", "avx2", "other")
