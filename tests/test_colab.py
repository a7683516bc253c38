"""The Colab-ready notebooks in colab/: in sync with nbs/, free of nbdev directives, installable, runnable offline.

Every generated notebook is checked structurally: after its install cell, its code is its source's code
line for line, less nbdev's directive comments, so what `nbdev_test` ran is what a Colab reader runs.
The copies of the library pages are also executed here, offline, with the install cell in dry mode, from a
temporary folder outside the repository (as on Colab), against the installed package.
Executing every chapter's copy as well would run each chapter twice in CI (over the time budget at 19
chapters), so only the quickest chapter's copy runs here; `make colab-test` runs them all on demand
(ICMLBOOK_COLAB_EXECUTE=all).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from icmlbook.core import temp_env

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import colab  # noqa: E402

COPIES = sorted((ROOT / "colab").glob("*.ipynb"))
EXECUTE_ALL = os.environ.get("ICMLBOOK_COLAB_EXECUTE") == "all"
ONE_CHAPTER = "02_data_pricing.ipynb"  # the quickest chapter: one chapter's copy always runs where Colab runs it
RUN = [p for p in COPIES if EXECUTE_ALL or not p.name[:2].isdigit() or p.name.startswith("00_") or p.name == ONE_CHAPTER]


def code_cells(path: Path) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
            if c["cell_type"] == "code"]


def test_colab_copies_are_in_sync_with_the_sources():
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "colab.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert {p.name for p in COPIES} == {p.name for p in (ROOT / "nbs").glob("*.ipynb")}


@pytest.mark.parametrize("copy", COPIES, ids=lambda p: p.name)
def test_copy_is_its_source_without_directives(copy):
    install, *code = code_cells(copy)
    assert "pip" in install and "git+" in install
    expected = []
    for src in code_cells(ROOT / "nbs" / copy.name):
        if "default_exp" in colab.directives(src):
            continue
        body = "\n".join(l for l in src.split("\n") if not l.startswith("#|")).strip("\n")
        if "slow" in colab.directives(src):
            body = colab.SLOW_NOTE + "\n" + body
        if body:
            expected.append(body)
    assert code == expected
    assert not any(line.startswith("#|") for c in code for line in c.splitlines())


def test_install_cell_never_touches_torch():
    install = code_cells(COPIES[0])[0]
    r = subprocess.run([sys.executable, "-c", install], capture_output=True, text=True,
                       env={**os.environ, colab.DRY_ENV: "1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("dry run:") and "icmlbook[colab] @ git+https://" in r.stdout
    assert "torch" not in r.stdout and "--upgrade" not in r.stdout and "-U " not in r.stdout


@pytest.mark.parametrize("copy", RUN, ids=lambda p: p.name)
def test_copy_runs_offline_outside_the_repository(copy, tmp_path):
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient
    nb = nbformat.read(copy, as_version=4)
    env = {colab.DRY_ENV: "1", "ICMLBOOK_LEDGER": str(tmp_path), "ICMLBOOK_PROGRESS": "0",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    nb.cells = [c for c in nb.cells if not (c.cell_type == "code" and c.source.startswith(colab.SLOW_NOTE))]
    with temp_env(**env):  # the kernel inherits the environment of the process that starts it
        # where Colab runs it: a folder outside the repository, with the package installed
        NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    install_out = "".join(o.get("text", "") for o in nb.cells[[c.cell_type for c in nb.cells].index("code")].outputs)
    assert install_out.startswith("dry run:")
