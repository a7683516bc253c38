"""The claims ledger and the scoreboard, across chapters."""
import json
import subprocess
import sys
import os

import pytest

from icmlbook.claims import (BUDGET_SECONDS, CHAPTERS, ChapterRun, Check, ClaimRecord, notebook_name, scoreboard,
                             scoreboard_table)


@pytest.fixture
def book(tmp_path, monkeypatch):
    "An empty ledger and a notebooks folder holding two chapters."
    led, nbs = tmp_path / "ledger", tmp_path / "nbs"
    nbs.mkdir()
    for slug in ("bas", "datashifts"):
        (nbs / notebook_name(slug)).write_text(json.dumps({"cells": [{"cell_type": "code", "source": ["x = 1"]}]}))
    monkeypatch.setenv("ICMLBOOK_LEDGER", str(led))
    return led, nbs


def run_chapter(slug, nbs, ratio=0.13, seconds=None):
    run = ChapterRun(slug, nbs_dir=nbs, show=False)
    run.record("C1", "the state is 12.5% of AdamW's", "ratio in [0.125, 0.14]",
               [Check("ratio", "in", (0.125, 0.14))], {"ratio": [ratio, ratio]}, [0, 1])
    run.finish()
    if seconds is not None:  # pretend the chapter took this long
        data = json.loads(run.path.read_text()); data["wall_time"] = seconds; run.path.write_text(json.dumps(data))
    return run


def test_record_round_trips_through_json(book):
    led, nbs = book
    run_chapter("bas", nbs)
    stored = json.loads((led / "bas.json").read_text())["claims"][0]
    rec = ClaimRecord.from_dict(json.loads(json.dumps(stored)))
    assert rec.to_dict() == stored and rec.verdict == "[Re]"
    for key in ("chapter", "claim", "criterion", "checks", "measured", "seeds", "scale", "verdict"):
        assert key in stored
    data = json.loads((led / "bas.json").read_text())
    for key in ("wall_time", "versions", "started", "notebook_hash"):
        assert data[key] is not None


def test_missing_chapters_are_not_run(book):
    led, nbs = book
    run_chapter("bas", nbs)
    rows = {r["chapter"]: r for r in scoreboard(led, nbs)}
    assert rows["datashifts"]["status"] == "not run" and rows["datashifts"]["verdicts"] == []
    assert all(rows[s]["status"] == "not written" for s, _ in CHAPTERS if s not in ("bas", "datashifts"))


def test_a_chapter_that_starts_again_forgets_its_old_verdicts(book):
    led, nbs = book
    run_chapter("bas", nbs)
    ChapterRun("bas", nbs_dir=nbs, show=False)  # a new run that fails before its claim check
    assert {r["chapter"]: r for r in scoreboard(led, nbs)}["bas"]["status"] == "not run"


def test_changed_notebook_is_stale(book):
    led, nbs = book
    run_chapter("bas", nbs)
    (nbs / "04_bas.ipynb").write_text(json.dumps({"cells": [{"cell_type": "code", "source": ["x = 2"]}]}))
    row = {r["chapter"]: r for r in scoreboard(led, nbs)}["bas"]
    assert row["status"] == "stale" and row["verdicts"] == []


def test_a_verdict_cannot_be_forced(book):
    led, nbs = book
    run_chapter("bas", nbs, ratio=0.5)  # outside the interval: [¬Re]
    data = json.loads((led / "bas.json").read_text())
    assert data["claims"][0]["verdict"] == "[¬Re]"
    data["claims"][0]["verdict"] = "[Re]"
    (led / "bas.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="disagrees with its measured values"):
        scoreboard(led, nbs)
    with pytest.raises(TypeError):
        ChapterRun("bas", nbs_dir=nbs, show=False).record(
            "C1", "c", "k", [Check("ratio", "<=", 1)], {"ratio": 0.5}, [0], verdict="[Re]")


def test_bad_input_is_rejected(book):
    _, nbs = book
    run = ChapterRun("bas", nbs_dir=nbs, show=False)
    with pytest.raises(ValueError, match="claim must be a non-empty string"):
        run.record("C1", "", "k", [Check("ratio", "<=", 1)], {"ratio": 0.5}, [0])
    with pytest.raises(ValueError, match="needs a measured value"):
        run.record("C1", "c", "k", [Check("ratio", "<=", 1)], {"other": 0.5}, [0])
    with pytest.raises(ValueError, match="chapter must be one of"):
        ChapterRun("adam", nbs_dir=nbs, show=False)


def test_over_budget_is_flagged_in_the_board_and_the_terminal(book):
    led, nbs = book
    run_chapter("bas", nbs, seconds=BUDGET_SECONDS + 30)
    run_chapter("datashifts", nbs, seconds=12)
    rows = {r["chapter"]: r for r in scoreboard(led, nbs)}
    assert rows["bas"]["over_budget"] and not rows["datashifts"]["over_budget"]
    assert "120 s **over budget**" in scoreboard_table(list(rows.values()))
    r = subprocess.run([sys.executable, "-m", "icmlbook.claims", "--ledger", str(led), "--nbs", str(nbs)],
                       capture_output=True, text=True, env=dict(os.environ))
    assert r.returncode == 0 and "over the 90 s budget: bas" in r.stdout and "12 s" in r.stdout
