"""The claims protocol across chapters: registry, confirm seeds, robustness, equal care, sanity, nulls, scales, the scoreboard."""
import json
import os
import subprocess
import sys

import pytest

from icmlbook.claims import (BUDGET_SECONDS, CHAPTERS, ChapterRun, ClaimRecord, claim_table, load_registry,
                             notebook_name, registry_path, scoreboard, scoreboard_table)

REGISTRY = """
chapter: bas
issue: 3
seeds: {ci: [100, 101, 102], confirm: [1000, 1001, 1002, 1003, 1004]}
burned: [103]
untuned: {closed form: it has no knob}
claims:
  C1:
    claim: the state is 12.5% of AdamW's
    criterion: "ratio in [0.125, 0.14], and |a/b| stays below 1"
    checks: ["ratio in [0.125, 0.14]"]
  C2:
    claim: the method beats the baseline
    criterion: method loss < baseline loss
    checks: [method_loss < baseline_loss]
    arms: [method, baseline]
"""


@pytest.fixture
def book(tmp_path, monkeypatch):
    "An empty ledger, a registry folder, a results folder and a notebooks folder holding two chapters."
    led, nbs, regs, res = tmp_path / "ledger", tmp_path / "nbs", tmp_path / "claims", tmp_path / "results"
    for d in (nbs, regs, res):
        d.mkdir()
    for slug in ("bas", "datashifts"):
        (nbs / notebook_name(slug)).write_text(json.dumps({"cells": [{"cell_type": "code", "source": ["x = 1"]}]}))
    (regs / "bas.yml").write_text(REGISTRY)
    (regs / "datashifts.yml").write_text(registry_path("datashifts").read_text())
    monkeypatch.setenv("ICMLBOOK_LEDGER", str(led))
    monkeypatch.setenv("ICMLBOOK_SCALE", "ci")
    return led, nbs, regs, res


def board(book):
    led, nbs, regs, res = book
    return {r["chapter"]: r for r in scoreboard(led / "ci", nbs, res, regs)}


def start(book, slug="bas"):
    _, nbs, regs, _ = book
    return ChapterRun(slug, nbs_dir=nbs, show=False, registry=regs / f"{slug}.yml")


def run_bas(book, ratio=0.13, seconds=None):
    run = start(book)
    run.record("C1", {"ratio": [ratio] * 3}, [100, 101, 102])
    run.finish()
    if seconds is not None:  # pretend the chapter took this long
        data = json.loads(run.path.read_text()); data["wall_time"] = seconds; run.path.write_text(json.dumps(data))
    return run


def test_every_written_chapter_has_a_registry_that_parses(root):
    for slug, _ in CHAPTERS:
        if (root / "nbs" / notebook_name(slug)).exists():
            reg = load_registry(slug)
            assert reg.claims and all(set(c.seeds) == {"ci", "confirm"} for c in reg.claims.values()), slug
            assert len(reg.confirm_seeds) >= 5, slug
            seen = set(reg.tuning_seeds) | set(reg.burned) | set(reg.development)
            seen |= {s for c in reg.claims.values() for s in c.seeds["ci"]}
            assert not seen & set(reg.confirm_seeds), slug  # the loader refuses it too; this says which chapter


def test_every_seed_a_confirmation_run_looked_at_is_still_confirm_or_burned(root):
    "Registering fresh confirm seeds must move the old ones to `burned:`; a looked-at seed never becomes fresh again."
    from icmlbook.claims import looks
    for slug, _ in CHAPTERS:
        if not (root / "nbs" / notebook_name(slug)).exists(): continue
        reg = load_registry(slug)
        for look in looks(slug, root / "results"):
            assert set(look["seeds"]) <= set(reg.confirm_seeds) | set(reg.burned), (slug, look["seeds"])


def test_a_registry_whose_confirm_seeds_were_seen_is_refused(book):
    from icmlbook.claims import Registry
    for text in (REGISTRY.replace("burned: [103]", "burned: [1003]"),
                 REGISTRY.replace("ci: [100, 101, 102]", "ci: [100, 101, 1002]"),
                 REGISTRY.replace("burned: [103]", "burned: [103]\ndevelopment: [1000]"),
                 REGISTRY.replace("seeds: {ci:", "seeds: {tuning: [1004], ci:")):
        with pytest.raises(ValueError, match="confirm seeds must be fresh"):
            Registry.from_text(text, "bas")


def test_record_takes_the_criterion_from_the_registry(book):
    led, *_ = book
    run_bas(book)
    stored = json.loads((led / "ci" / "bas.json").read_text())["claims"][0]
    assert stored["criterion"] == "ratio in [0.125, 0.14], and |a/b| stays below 1"
    assert stored["checks"][0] == {"quantity": "ratio", "op": "in", "holds": True, "bound": [0.125, 0.14]}
    rec = ClaimRecord.from_dict(json.loads(json.dumps(stored)))
    assert rec.to_dict() == stored and rec.verdict == "[Re]"
    data = json.loads((led / "ci" / "bas.json").read_text())
    for key in ("wall_time", "versions", "started", "code_hash", "machine"):
        assert data[key] is not None


def test_an_unregistered_claim_cannot_be_recorded(book):
    run = start(book)
    with pytest.raises(ValueError, match="'C9' is not registered"):
        run.record("C9", {"ratio": 0.13}, [100, 101, 102])


def test_a_stored_record_that_differs_from_the_registry_is_rejected(book):
    led, *_ = book
    run_bas(book)
    data = json.loads((led / "ci" / "bas.json").read_text())
    data["claims"][0]["checks"][0]["bound"] = [0.0, 1.0]  # a looser check, typed into the ledger
    (led / "ci" / "bas.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="differs from its registered claim, criterion or checks"):
        board(book)


def test_values_from_other_than_the_verdict_seeds_are_refused(book):
    run = start(book)
    for seeds in ([0, 1, 2], [100, 101], [100, 101, 102, 103]):
        with pytest.raises(ValueError, match=r"registered seeds \[100, 101, 102\] at scale 'ci'"):
            run.record("C1", {"ratio": [0.13] * len(seeds)}, seeds)
    with pytest.raises(ValueError, match="one value per seed"):
        run.record("C1", {"ratio": [0.13, 0.13]}, [100, 101, 102])


def test_the_full_scale_has_its_own_seeds_and_ledger(book, monkeypatch):
    led, *_ = book
    monkeypatch.setenv("ICMLBOOK_SCALE", "full")
    run = start(book)
    with pytest.raises(ValueError, match="its confirm seeds"):
        run.record("C1", {"ratio": [0.13] * 3}, [100, 101, 102])
    run.record("C1", {"ratio": [0.13] * 5}, [1000, 1001, 1002, 1003, 1004])
    run.finish()
    assert json.loads((led / "full" / "bas.json").read_text())["scale"] == "full"
    assert not (led / "ci" / "bas.json").exists()


def test_one_seed_that_flips_the_verdict_is_fragile(book):
    led, *_ = book
    run = start(book)
    flip = run.record("C1", {"ratio": [0.13, 0.132, 0.16]}, [100, 101, 102])  # mean 0.1407: seed 102 decides
    assert flip.verdict == "[¬Re]" and any("without seed 102" in w for w in flip.fragile)
    run.finish()
    assert board(book)["bas"]["verdicts"][0] == "C1 [¬Re] fragile"


def test_seeds_that_agree_far_from_the_bound_are_not_fragile(book):
    rec = start(book).record("C1", {"ratio": [0.131, 0.132, 0.133]}, [100, 101, 102])
    assert (rec.verdict, rec.fragile, rec.summary()) == ("[Re]", [], "[Re]")


def test_unequal_tuning_budgets_are_flagged(book):
    run = start(book)
    run.tune("method", lambda lr: (lr - 0.1) ** 2, {"lr": [0.01, 0.1, 1.0, 3.0]})
    run.tune("baseline", lambda lr: (lr - 0.1) ** 2, {"lr": [0.1]})
    rec = run.record("C2", {"method_loss": [1.0] * 3, "baseline_loss": [2.0] * 3}, [100, 101, 102])
    assert rec.care == {"method": 4, "baseline": 1} and rec.unequal_care
    assert rec.summary() == "[?Re] (grid too small) unequal care"  # one setting tried: nothing bracketed either


def test_equal_budgets_and_untuned_by_design_arms_are_not_flagged(book):
    _, _, regs, _ = book
    (regs / "bas.yml").write_text(REGISTRY.replace("arms: [method, baseline]", "arms: [method, baseline, closed form]"))
    run = start(book)
    for arm in ("method", "baseline"):
        run.tune(arm, lambda lr: (lr - 0.1) ** 2, {"lr": [0.01, 0.1, 1.0]})
    rec = run.record("C2", {"method_loss": [1.0] * 3, "baseline_loss": [2.0] * 3}, [100, 101, 102])
    assert rec.care == {"method": 3, "baseline": 3, "closed form": "untuned: it has no knob"}
    assert rec.flags() == ["development seeds"] and rec.verdict == "[Re]"
    assert "| baseline | lr ∈ {0.01, 0.1, 1.0} | 3 | lr = 0.1 | 0 | — |" in run.tuning_table()


def test_a_baseline_tuned_at_the_edge_of_its_grid_makes_the_claim_inconclusive(book):
    run = start(book)
    run.tune("method", lambda lr: (lr - 0.1) ** 2, {"lr": [0.01, 0.1, 1.0]})
    run.tune("baseline", lambda lr: (lr - 0.001) ** 2, {"lr": [0.01, 0.1, 1.0]})  # its optimum lies below the grid
    rec = run.record("C2", {"method_loss": [1.0] * 3, "baseline_loss": [2.0] * 3}, [100, 101, 102])
    assert (rec.verdict, rec.checks_verdict, rec.inconclusive) == ("[?Re]", "[Re]", ["baseline: edge of grid (lr)"])


def test_a_registered_null_must_be_recorded_and_beaten(book):
    _, _, regs, _ = book
    (regs / "bas.yml").write_text(REGISTRY.replace("arms: [method, baseline]",
                                                   "arms: [method, baseline]\n    nulls: {method: [the base model]}"))
    run = start(book)
    for arm in ("method", "baseline"):
        run.tune(arm, lambda lr: (lr - 0.1) ** 2, {"lr": [0.01, 0.1, 1.0]})
    rec = run.record("C2", {"method_loss": [1.0] * 3, "baseline_loss": [2.0] * 3}, [100, 101, 102])
    assert rec.verdict == "[?Re]" and rec.summary() == "[?Re] (null not recorded)"
    run.sanity("method", "validation loss", [1.0, 1.0, 3.0], "<", 2.0, against="the base model")  # loses on one seed
    run.finish()
    assert board(book)["bas"]["verdicts"][0] == "C2 [?Re] (sanity failed)"


def test_a_failed_sanity_check_makes_the_claim_inconclusive(book):
    run = start(book)
    assert not run.sanity("baseline", "validation accuracy", [0.9, 0.5, 0.9], ">", 0.55, against="majority answer")
    rec = run.record("C2", {"method_loss": [1.0] * 3, "baseline_loss": [2.0] * 3}, [100, 101, 102])
    assert rec.verdict == "[?Re]" and rec.checks_verdict == "[Re]"
    run.finish()
    assert board(book)["bas"]["verdicts"] == ["C2 [?Re] (sanity failed) care not recorded", "C1 missing"]


def test_a_sanity_check_recorded_after_the_claim_still_counts(book):
    led, *_ = book
    run = start(book)
    rec = run.record("C2", {"method_loss": [1.0] * 3, "baseline_loss": [2.0] * 3}, [100, 101, 102])
    assert rec.verdict == "[Re]"
    run.sanity("method", "mutual information", [-0.1, 0.2, 0.3], ">=", 0.0)
    run.finish()
    assert json.loads((led / "ci" / "bas.json").read_text())["claims"][0]["verdict"] == "[?Re]"


def test_a_criterion_with_pipes_renders_as_one_table_row(book):
    led, *_ = book
    run_bas(book)
    claims = json.loads((led / "ci" / "bas.json").read_text())["claims"]
    table = claim_table(claims)
    assert len(table.splitlines()) == 3
    assert len(table.splitlines()[2].replace("\\|", "").split("|")) == 6  # four cells between the outer pipes


def test_missing_and_not_run_and_not_written(book):
    run_bas(book)
    rows = board(book)
    assert rows["bas"]["missing"] == ["C2"] and "C2 missing" in rows["bas"]["verdicts"]
    assert rows["datashifts"]["status"] == "not run" and rows["datashifts"]["verdicts"] == []
    assert all(rows[s]["status"] == "not written" for s, _ in CHAPTERS if s not in ("bas", "datashifts"))


def test_a_chapter_that_starts_again_forgets_its_old_verdicts(book):
    run_bas(book)
    start(book)  # a new run that fails before its claim check
    assert board(book)["bas"]["status"] == "not run"


def test_a_changed_notebook_or_registry_makes_the_record_stale(book):
    _, nbs, regs, _ = book
    run_bas(book)
    assert board(book)["bas"]["status"] == "ran"
    (regs / "bas.yml").write_text(REGISTRY.replace("the state is", "the optimizer state is"))
    assert board(book)["bas"]["status"] == "stale"
    (regs / "bas.yml").write_text(REGISTRY)
    (nbs / "04_bas.ipynb").write_text(json.dumps({"cells": [{"cell_type": "code", "source": ["x = 2"]}]}))
    row = board(book)["bas"]
    assert row["status"] == "stale" and row["verdicts"] == []


def test_a_confirmation_record_is_the_verdict_and_says_when_its_code_changed(book, monkeypatch):
    led, nbs, _, res = book
    assert board(book)["bas"]["confirm"]["status"] == "not confirmed"
    monkeypatch.setenv("ICMLBOOK_SCALE", "full")
    run = start(book)
    run.record("C1", {"ratio": [0.13] * 5}, [1000, 1001, 1002, 1003, 1004])
    run.finish()
    (res / "full").mkdir()
    (res / "full" / "bas.json").write_text((led / "full" / "bas.json").read_text())
    row = board(book)["bas"]
    assert row["status"] == "not run" and row["confirm"]["status"] == "confirmed" and row["confirm"]["current"]
    assert row["confirm"]["verdicts"][0] == "C1 [Re]"
    line = scoreboard_table(list(board(book).values())).splitlines()[5]  # chapter 04
    assert line.split(" | ")[2].startswith("C1 [Re]")  # the confirmation column comes first
    (nbs / "04_bas.ipynb").write_text(json.dumps({"cells": [{"cell_type": "code", "source": ["x = 2"]}]}))
    row = board(book)["bas"]
    assert row["confirm"]["current"] is False and "code changed since: stale" in scoreboard_table([row])


def test_a_republish_on_the_same_confirm_seeds_from_other_code_is_flagged(book, monkeypatch):
    led, nbs, _, res = book
    monkeypatch.setenv("ICMLBOOK_SCALE", "full")
    run = start(book)
    run.record("C1", {"ratio": [0.13] * 5}, [1000, 1001, 1002, 1003, 1004])
    run.finish()
    (res / "full").mkdir(); (res / "looks").mkdir()
    data = json.loads((led / "full" / "bas.json").read_text())
    (res / "full" / "bas.json").write_text(json.dumps(data))
    look = lambda h: json.dumps({"date": "2026-12-06", "code_hash": h, "seeds": [1000, 1001, 1002, 1003, 1004], "verdicts": {}})
    (res / "looks" / "bas.jsonl").write_text("\n".join([look("a"), look("b"), look(data["code_hash"])]) + "\n")
    row = board(book)["bas"]
    assert row["confirm"]["reruns"] == 2 and row["confirm"]["verdicts"] == ["C1 [Re] re-run after a look (2)"]


def test_only_a_full_scale_run_publishes(root):
    r = subprocess.run([sys.executable, "-m", "icmlbook.claims", "run", "bas", "--publish"], capture_output=True,
                       text=True, cwd=root)
    assert r.returncode == 1 and "only a full-scale run on the confirm seeds publishes" in r.stderr


def test_a_verdict_cannot_be_forced(book):
    led, *_ = book
    run_bas(book, ratio=0.5)  # outside the interval: [¬Re]
    data = json.loads((led / "ci" / "bas.json").read_text())
    assert data["claims"][0]["verdict"] == "[¬Re]"
    data["claims"][0]["verdict"] = "[Re]"
    (led / "ci" / "bas.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="disagrees with its measured values"):
        board(book)


def test_over_budget_is_flagged_in_the_board_and_the_terminal(book):
    led, nbs, regs, _ = book
    run_bas(book, seconds=BUDGET_SECONDS + 30)
    rows = board(book)
    assert rows["bas"]["over_budget"] and "120 s **over budget**" in scoreboard_table(list(rows.values()))
    r = subprocess.run([sys.executable, "-m", "icmlbook.claims", "--ledger", str(led / "ci"), "--nbs", str(nbs),
                        "--registries", str(regs)],
                       capture_output=True, text=True, env=dict(os.environ))
    assert r.returncode == 0 and "over the 90 s budget: bas" in r.stdout


def test_run_refuses_an_unknown_chapter_and_scale():
    r = subprocess.run([sys.executable, "-m", "icmlbook.claims", "run", "adam"], capture_output=True, text=True)
    assert r.returncode == 1 and "chapter must be one of" in r.stderr
    r = subprocess.run([sys.executable, "-m", "icmlbook.claims", "run", "bas", "--scale", "huge"], capture_output=True, text=True)
    assert r.returncode == 2 and "invalid choice: 'huge'" in r.stderr
