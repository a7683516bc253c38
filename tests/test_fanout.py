"""Confirmation runs fanned out per seed: `run <slug> --seed S` for each seed, then `merge <slug>`, record what one
run over all the seeds records, and `merge` refuses seed jobs that cannot be combined."""
import json
import os
import subprocess
import sys

import pytest

from icmlbook.claims import ChapterRun, load_registry, merge_records, scoreboard

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent
REGISTRY = """
chapter: bas
seeds: {tuning: [7], ci: [100, 101], confirm: [1000, 1001, 1002, 1003, 1004]}
claims:
  C1:
    claim: c
    criterion: ratio <= 1
    checks: [ratio <= 1]
  C2:
    claim: d
    criterion: x >= 0
    checks: [x >= 0]
    seeds: {ci: [100], confirm: [1000]}
"""


def job(tmp_path, monkeypatch, seed, ratio=0.5, x=1.0, code="x = 1"):
    "One seed job of a tiny chapter, run in this process; returns its ledger record."
    (tmp_path / "bas.yml").write_text(REGISTRY)
    nbs = tmp_path / "nbs"; nbs.mkdir(exist_ok=True)
    (nbs / "04_bas.ipynb").write_text(json.dumps({"cells": [{"cell_type": "code", "source": [code]}]}))
    monkeypatch.setenv("ICMLBOOK_LEDGER", str(tmp_path / "ledger"))
    monkeypatch.setenv("ICMLBOOK_SCALE", "ci")
    monkeypatch.setenv("ICMLBOOK_SEED", "" if seed is None else str(seed))
    run = ChapterRun("bas", nbs_dir=nbs, show=False, registry=tmp_path / "bas.yml")
    run.tune("m", lambda lr: abs(lr - 0.1), {"lr": [0.01, 0.1, 1.0]}, seed=7)  # one tuning serves every job
    run.record("C1", {"ratio": [ratio * (1 + s / 1000) for s in run.seeds("C1")], "n": 3.0}, run.seeds("C1"))
    run.record("C2", {"x": x}, run.seeds("C2"))
    run.finish()
    return json.loads(run.path.read_text())


def test_seed_jobs_merge_into_the_record_of_one_run(tmp_path, monkeypatch):
    whole = job(tmp_path, monkeypatch, None)
    parts = [job(tmp_path, monkeypatch, s) for s in (101, 100)]
    assert parts[0]["claims"][0]["seeds"] == [101] and parts[0]["claims"][1]["seeds"] == [100]  # C2 is judged on 100 only
    merged = merge_records("bas", parts, tmp_path / "bas.yml")
    assert merged["claims"] == whole["claims"] and merged["tuning"] == whole["tuning"]


def test_merge_refuses_missing_seeds_mixed_code_and_disagreeing_jobs(tmp_path, monkeypatch):
    reg = tmp_path / "bas.yml"
    p100 = job(tmp_path, monkeypatch, 100)
    with pytest.raises(ValueError, match=r"ran seeds \[100\], the registry's ci seeds are \[100, 101\]: missing \[101\]"):
        merge_records("bas", [p100], reg)
    p101 = job(tmp_path, monkeypatch, 101, code="x = 2")
    with pytest.raises(ValueError, match="ran different code: seed 100: code hash .*; seed 101: code hash"):
        merge_records("bas", [p100, p101], reg)
    p101 = job(tmp_path, monkeypatch, 101)
    p101["tuning"][0]["chosen"] = {"lr": 1.0}
    with pytest.raises(ValueError, match="the tuning of m on tuning seed 7 .* differs between the seed jobs"):
        merge_records("bas", [p100, p101], reg)
    with pytest.raises(ValueError, match="ICMLBOOK_SEED must be one of chapter 'bas'"):
        job(tmp_path, monkeypatch, 5)


def claims_without_timings(record: dict) -> list[dict]:
    "The claims of a record, with the values of repeated (timing) quantities and what follows from them left out."
    reg, out = load_registry(record["chapter"]), []
    for c in record["claims"]:
        c = dict(c)
        if reg.claim(c["id"]).repeat:
            c["measured"] = {k: v for k, v in c["measured"].items() if k not in reg.claim(c["id"]).repeat}
            for k in ("checks", "checks_held", "seed_holds", "fragile", "flags"):
                c.pop(k)
        out.append(c)
    return out


def test_a_chapter_run_seed_by_seed_and_merged_equals_the_chapter_run_whole(tmp_path):
    """data_pricing at the ci scale: its seed jobs (side by side) and their merge against one run of it (timings aside,
    which vary from run to run). The one run is the one `make test` just made, when its record is current."""
    env = {**os.environ, "ICMLBOOK_LEDGER": str(tmp_path / "ledger")}
    claims = lambda *a: subprocess.Popen([sys.executable, "-m", "icmlbook.claims", *a], cwd=ROOT, env=env,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    jobs = [claims("run", "data_pricing", "--seed", str(s)) for s in load_registry("data_pricing").claim("C2").seeds["ci"]]
    built = ROOT / "_build" / "ledger" / "ci" / "data_pricing.json"
    current = next((r for r in scoreboard() if r["chapter"] == "data_pricing"), {}).get("status") == "ran" and built.exists()
    whole = None if current else claims("run", "data_pricing")
    for p in jobs + [whole] * (whole is not None):
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    whole_record = json.loads(built.read_text()) if current else \
        json.loads((tmp_path / "ledger" / "ci" / "data_pricing.json").read_text())
    r = subprocess.run([sys.executable, "-m", "icmlbook.claims", "merge", "data_pricing", "--scale", "ci", "--no-publish"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    merged = json.loads((tmp_path / "ledger" / "ci" / "data_pricing.json").read_text())
    assert claims_without_timings(merged) == claims_without_timings(whole_record)
    assert [c["verdict"] for c in merged["claims"]] == [c["verdict"] for c in whole_record["claims"]]


def test_a_rehearsal_runs_the_full_scale_on_the_development_seeds_and_never_publishes(tmp_path, monkeypatch):
    "`run <slug> --rehearse`: the full scale's design on the ci seeds, its own ledger folder, never a confirmation."
    from icmlbook.claims import run_chapter
    monkeypatch.setenv("ICMLBOOK_REHEARSE", "1")
    monkeypatch.setenv("ICMLBOOK_SCALE", "full")
    (tmp_path / "bas.yml").write_text(REGISTRY)
    monkeypatch.setenv("ICMLBOOK_LEDGER", str(tmp_path / "ledger"))
    run = ChapterRun("bas", show=False, registry=tmp_path / "bas.yml")
    assert run.scale == "full" and run.seeds("C1") == (100, 101) and run.seeds("C2") == (100,)
    rec = run.record("C1", {"ratio": [0.5, 0.6]}, [100, 101])
    assert rec.seed_kind == "development" and rec.scale == "full"
    with pytest.raises(ValueError, match=r"registered seeds \[100\] at scale 'full' \(its ci \(development\) seeds\)"):
        run.record("C2", {"x": [1.0]}, [1000])
    run.finish()
    assert run.path == tmp_path / "ledger" / "rehearsal" / "bas.json" and not (tmp_path / "ledger" / "full").exists()
    monkeypatch.setenv("ICMLBOOK_SEED", "100")
    with pytest.raises(ValueError, match="a rehearsal runs every development seed"):
        ChapterRun("bas", show=False, registry=tmp_path / "bas.yml")
    monkeypatch.setenv("ICMLBOOK_SEED", "")
    monkeypatch.setenv("ICMLBOOK_SCALE", "ci")
    with pytest.raises(ValueError, match="rehearses the full scale on the development seeds; the scale is 'ci'"):
        ChapterRun("bas", show=False, registry=tmp_path / "bas.yml")
    monkeypatch.setenv("ICMLBOOK_REHEARSE", "yes")
    with pytest.raises(ValueError, match="ICMLBOOK_REHEARSE must be 0 or 1"):
        ChapterRun("bas", show=False, registry=tmp_path / "bas.yml")
    for kw in (dict(scale="full", publish=True), dict(scale="ci"), dict(scale="full", seed=1000)):
        with pytest.raises(ValueError, match="rehearse runs the full scale on the development seeds, whole, and never publishes"):
            run_chapter("bas", timeout=10, rehearse=True, **kw)


def test_publishing_removes_the_stored_tasks_of_unfinished_runs(tmp_path, monkeypatch):
    from icmlbook.claims import _publish
    (tmp_path / "settings.ini").write_text("[DEFAULT]\nlib_name = icmlbook\n")
    part = tmp_path / "results" / "partial" / "bas" / "0123456789abcdef"
    part.mkdir(parents=True)
    (part / "task.pt").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    data, said = job(tmp_path, monkeypatch, None), []
    _publish("bas", data, said.append)
    assert (tmp_path / "results" / "full" / "bas.json").is_file()
    assert not (tmp_path / "results" / "partial" / "bas").exists()
    assert any("removed results/partial/bas" in s for s in said), said
