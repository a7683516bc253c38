"""Start a new chapter from the template: `make chapter SLUG=<slug>` (or `python tools/new_chapter.py <slug>`).

Writes
- nbs/NN_<slug>.ipynb with every section of ../shared/CHAPTER.md in order, the ChapterRun cell (first, so the
  chapter's clock includes its imports), the import cells, and a placeholder code cell in every section that
  raises until it is replaced: the new notebook fails `nbdev_test` until each section is written;
- nbs/claims/<slug>.yml, the claims registry, with a placeholder claim to replace by the issue's criteria;
and adds the chapter to _toc.yml (in its part, created if needed) and links it from the table in nbs/index.ipynb.
Run `make readme colab` afterwards (the README and the Colab copies are generated from nbs/).
"""
import argparse
import json
import re
import secrets
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from icmlbook.claims import CHAPTERS, notebook_name  # noqa: E402

# The book's parts, by chapter number (tests/test_structure.py checks the same ranges).
PARTS = {"Theory": range(1, 4), "Optimization and alignment": range(4, 9), "Graphs and fairness": range(9, 10),
         "Vision, language and multimodal": range(10, 15), "Signals, time series and the brain": range(15, 20)}
PLACEHOLDER = "raise NotImplementedError(\"placeholder: {what}\")"


def md(text: str) -> dict:
    return {"cell_type": "markdown", "id": secrets.token_hex(4), "metadata": {}, "source": _lines(text)}


def code(text: str) -> dict:
    return {"cell_type": "code", "execution_count": None, "id": secrets.token_hex(4), "metadata": {}, "outputs": [],
            "source": _lines(text)}


def _lines(text: str) -> list[str]:
    lines = text.strip("\n").split("\n")
    return [l + "\n" for l in lines[:-1]] + [lines[-1]]


def todo(what: str) -> dict:
    return code(PLACEHOLDER.format(what=what))


def template(slug: str, title: str) -> dict:
    "The new chapter's notebook: the sections of CHAPTER.md in order, each with a cell that fails until written."
    cells = [
        md(f"# {title}\n\nICML 2026. *One sentence: what this chapter shows.* *If the method was reconstructed from the "
           f"abstract (see the research note), say so here in one plain sentence.*"),
        code(f"#| default_exp {slug}"),
        code(f"#| hide\nfrom icmlbook.claims import ChapterRun\n\nrun = ChapterRun(\"{slug}\")  # first: the clock includes the imports"),
        code("#| export\nfrom __future__ import annotations\n\nimport numpy as np\nimport torch"),
        code("#| hide\nimport matplotlib.pyplot as plt\nfrom fastcore.test import test_close, test_eq, test_fail\n"
             "from IPython.display import Markdown, display\n\n"
             "from icmlbook.core import by_scale, progress, seed_everything, use_book_style\n\nuse_book_style()"),
        md("## The idea\n\n*One or two paragraphs for a reader who has not read the paper: the problem, why existing "
           "methods fail, what the paper changes.*"),
        todo("write 'The idea' above, then delete this cell"),
        md("## Theory\n\n*Definitions, the derivation with numbered equations, the statements the paper makes "
           "(`prf:definition`, `prf:theorem`, `prf:proof`; a sketch is labelled a sketch).*"),
        todo("a cell that checks the theory's statement numerically"),
        md("## Implementation\n\n*`#| export` cells: docstrings naming the equation they implement, type hints, "
           "shapes in comments, argument checks that raise ValueError/TypeError naming the argument.*"),
        todo("the exported implementation (#| export cells)"),
        md("## Tests\n\n*Right after the code they test: closed forms, agreement with a library routine, invariances, "
           "gradient checks, bad input rejected. Every test must be able to fail.*"),
        todo("tests of the implementation (test_eq, test_close, test_fail)"),
        md("## Experiment\n\n*The small-scale run of the headline claim against its baselines, sized with `by_scale`, "
           "with a figure. Every arm is tuned through `run.tune(arm, objective, grid)` on validation data with the "
           "same budget (or declared untuned by design in the registry), `run.tuning_table()` shows the tuning, and "
           "each learned arm passes `run.sanity(...)` before its comparison counts. Develop on development seeds; "
           "the verdict comes from one run on `run.seeds(claim_id)`.*"),
        todo("the experiment, its tuning table, its sanity checks and its figure"),
        md("## Claim check\n\n*For each registered claim (nbs/claims/" + slug + ".yml): `run.record(id, measured, "
           "seeds=run.seeds(id))`, with one value per verdict seed for every quantity the checks read.*"),
        todo("run.record(...) for every registered claim"),
        md("## Deviations from the paper\n\n:::{admonition} Deviations from the paper\n:class: warning\n\n"
           "- *Every difference from the paper, with its reason: reconstructed parts, scale, stand-ins, changed "
           "hyper-parameters, and anything changed after a look at verdict-seed results.*\n:::"),
        todo("fill in the deviations box above, then delete this cell"),
        md("## References\n\n- *The paper and the works the chapter leans on, through the book's bibliography "
           "(references.bib, cited as {cite}`key`).*"),
        code("run.finish()"),
    ]
    return {"cells": cells, "metadata": {"kernelspec": {"display_name": "python3", "language": "python",
                                                        "name": "python3"}},
            "nbformat": 4, "nbformat_minor": 5}


def registry(slug: str, issue: int | None) -> str:
    return (f"# Registered claims of chapter {notebook_name(slug)[:2]} (icmlbook.{slug}). Copy the claims, criteria and\n"
            f"# checks from the chapter's issue word for word, before the verdict run; then replace this placeholder.\n"
            f"# Develop on the ci seeds; the confirm seeds run once, at full scale, after the last change (protocol 3).\n"
            f"chapter: {slug}\nissue: {issue if issue is not None else 'null'}\n"
            f"seeds: {{tuning: [50], ci: [100, 101, 102], confirm: [1000, 1001, 1002, 1003, 1004]}}\n"
            f"development: []\nburned: []\nuntuned: {{}}\ntrained: {{}}\n"
            f"claims:\n  C1:\n    claim: \"placeholder: the paper's claim in one sentence\"\n"
            f"    criterion: \"placeholder: the issue's criterion, word for word\"\n"
            f"    checks: [placeholder_quantity >= 1]\n    arms: []\nlog: []\n")


def add_to_toc(root: Path, slug: str) -> None:
    path = root / "_toc.yml"
    text = path.read_text(encoding="utf-8")
    header = "".join(l for l in text.splitlines(keepends=True) if l.startswith("#"))
    toc = yaml.safe_load(text)
    entry, num = f"nbs/{Path(notebook_name(slug)).stem}", int(notebook_name(slug)[:2])
    caption = next(c for c, r in PARTS.items() if num in r)
    parts = toc["parts"]
    part = next((p for p in parts if p["caption"] == caption), None)
    if part is None:  # a new part, placed after the parts of earlier chapters
        order = list(PARTS)
        at = max([i + 1 for i, p in enumerate(parts) if p["caption"] in PARTS
                  and order.index(p["caption"]) < order.index(caption)], default=1)
        part = {"caption": caption, "chapters": []}
        parts.insert(at, part)
    files = [c["file"] for c in part["chapters"]]
    if entry not in files:
        part["chapters"].append({"file": entry})
        part["chapters"].sort(key=lambda c: c["file"])
    path.write_text(header + yaml.dump(toc, Dumper=_IndentedDumper, sort_keys=False, allow_unicode=True), encoding="utf-8")


class _IndentedDumper(yaml.SafeDumper):
    "Lists indented under their key, as _toc.yml is written by hand (PyYAML puts them flush with the key)."
    def increase_indent(self, flow=False, indentless=False):
        return super().increase_indent(flow, False)


def link_in_index(root: Path, slug: str) -> None:
    path = root / "nbs" / "index.ipynb"
    nb = json.loads(path.read_text(encoding="utf-8"))
    row = re.compile(rf"^(\| {notebook_name(slug)[:2]} \| ){slug}( \|)", re.M)
    for c in nb["cells"]:
        src = "".join(c["source"])
        if c["cell_type"] == "markdown" and row.search(src):
            c["source"] = _lines(row.sub(rf"\1[{slug}]({Path(notebook_name(slug)).stem}.ipynb)\2", src))
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("slug", help=f"one of {[s for s, _ in CHAPTERS]}")
    p.add_argument("--issue", type=int, default=None, help="the chapter's issue number")
    p.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this one)")
    a = p.parse_args(argv)
    try:
        name = notebook_name(a.slug)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    nb, reg = a.root / "nbs" / name, a.root / "nbs" / "claims" / f"{a.slug}.yml"
    if nb.exists() or reg.exists():
        print(f"error: {nb.relative_to(a.root) if nb.exists() else reg.relative_to(a.root)} exists already", file=sys.stderr)
        return 2
    title = dict(CHAPTERS)[a.slug]
    nb.write_text(json.dumps(template(a.slug, title), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    reg.parent.mkdir(parents=True, exist_ok=True)
    reg.write_text(registry(a.slug, a.issue), encoding="utf-8")
    add_to_toc(a.root, a.slug)
    link_in_index(a.root, a.slug)
    print(f"wrote {nb.relative_to(a.root)} and {reg.relative_to(a.root)}; added it to _toc.yml and the index table.\n"
          f"Next: read ../shared/papers/{a.slug}.md, replace every placeholder cell, then `make readme colab`.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
