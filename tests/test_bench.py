"""Every benchmark case runs once at a tiny size, so that none of them can rot (timings are not checked)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import cases  # noqa: E402,F401
from harness import CASES, add_ratios, markdown, median_time, run, slopes  # noqa: E402


@pytest.mark.parametrize("name", sorted(CASES))
def test_case_runs_at_tiny_size(name, tmp_path):
    results = run([name], tiny=True, out=tmp_path, log=lambda *_: None)
    rows = results["cases"][name]["rows"]
    assert all(r["seconds"] is None or r["seconds"] >= 0 for r in rows)
    assert name in (tmp_path / "bench.md").read_text() and (tmp_path / "bench.json").exists()


def test_ratio_and_slope_arithmetic():
    rows = add_ratios([{"variant": "ref", "size": 10, "seconds": 2.0},
                       {"variant": "new", "size": 10, "seconds": 1.0, "reference": "ref"},
                       {"variant": "ref", "size": 100, "seconds": 200.0}])
    assert rows[1]["ratio"] == 0.5 and "ratio" not in rows[0] and "reference" not in rows[1]
    assert slopes(rows) == pytest.approx({"ref": 2.0})


def test_median_excludes_warmup_and_rejects_bad_counts():
    calls = []
    assert median_time(lambda: calls.append(1), repeat=3, warmup=2) >= 0 and len(calls) == 5
    with pytest.raises(ValueError, match="repeat must be >= 1"):
        median_time(lambda: None, repeat=0)


def test_unknown_case_is_an_error():
    with pytest.raises(ValueError, match="unknown benchmark cases"):
        run(["nope"], tiny=True)
