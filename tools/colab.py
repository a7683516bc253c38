"""Write the Colab-ready notebooks: colab/<name>.ipynb for every notebook in nbs/.

    python tools/colab.py          # (re)write colab/
    python tools/colab.py --check  # exit 1 if colab/ is out of date with nbs/

Each Colab notebook is its source notebook with
- an install cell after the title that installs icmlbook from the repository, with its `colab` extra (what a
  chapter needs beyond the core requirements, e.g. laplace-torch), and nothing Colab already has (the
  package's requirements are ranges, so Colab's torch is kept); with ICMLBOOK_COLAB_DRY=1 it only
  prints the command, which is how the test suite runs it offline;
- nbdev's `default_exp` cells dropped and every `#|` directive line removed (a `#| slow` cell keeps a plain
  comment saying it is slow);
- outputs cleared.
The book's Colab launch buttons open these copies (see _ext/colab_launch.py). The code is otherwise the
source's, line for line, so what `nbdev_test` ran is what a Colab reader runs.
"""
import configparser
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SLOW_NOTE = "# slow: a long benchmark, skipped by the book's test suite"
DRY_ENV = "ICMLBOOK_COLAB_DRY"


def repo_url() -> str:
    ini = configparser.ConfigParser(delimiters=["="])
    ini.read(ROOT / "settings.ini")
    return ini["DEFAULT"]["git_url"]


def install_cell() -> dict:
    source = f'''# Install the book's package (on Colab). Libraries Colab already has, torch included, are kept.
import os, subprocess, sys
cmd = [sys.executable, "-m", "pip", "install", "-q", "icmlbook[colab] @ git+{repo_url()}"]
if os.environ.get("{DRY_ENV}") == "1":
    print("dry run:", " ".join(cmd))
else:
    subprocess.run(cmd, check=True)'''
    return {**code_cell(source, tags=["colab-install"]), "id": "colab-install"}


def code_cell(source: str, tags=None) -> dict:
    lines = source.split("\n")
    return {"cell_type": "code", "execution_count": None, "metadata": {"tags": tags} if tags else {},
            "outputs": [], "source": [l + "\n" for l in lines[:-1]] + [lines[-1]]}


def directives(source: str) -> list[str]:
    return [l[2:].strip().split()[0] for l in source.splitlines() if l.startswith("#|") and l[2:].strip()]


def convert(nb: dict) -> dict:
    cells = []
    for cell in nb["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] != "code":
            cells.append(cell)
            continue
        found = directives(src)
        if "default_exp" in found:
            continue
        body = "\n".join(l for l in src.split("\n") if not l.startswith("#|")).strip("\n")
        if "slow" in found:
            body = SLOW_NOTE + "\n" + body
        if body:
            cells.append({**code_cell(body), "id": cell["id"]} if "id" in cell else code_cell(body))
    title_end = 1 if cells and cells[0]["cell_type"] == "markdown" else 0
    cells.insert(title_end, install_cell())
    meta = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "colab": {"provenance": []}}
    return {"cells": cells, "metadata": meta, "nbformat": 4, "nbformat_minor": 5}


def render() -> dict[str, str]:
    out = {}
    for src in sorted((ROOT / "nbs").glob("*.ipynb")):
        nb = json.loads(src.read_text(encoding="utf-8"))
        out[src.name] = json.dumps(convert(nb), indent=1, ensure_ascii=False) + "\n"
    return out


def main() -> int:
    target = ROOT / "colab"
    wanted = render()
    have = {p.name: p.read_text(encoding="utf-8") for p in target.glob("*.ipynb")} if target.exists() else {}
    if "--check" in sys.argv:
        stale = sorted(set(wanted) ^ set(have) | {k for k in wanted if have.get(k) != wanted[k]})
        if stale:
            print(f"colab/ is out of date with nbs/ ({', '.join(stale)}): run `make colab`", file=sys.stderr)
            return 1
        return 0
    target.mkdir(exist_ok=True)
    for name in set(have) - set(wanted):
        (target / name).unlink()
    for name, text in wanted.items():
        (target / name).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
