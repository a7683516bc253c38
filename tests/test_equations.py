"""Docstrings and comments refer to a page's equations by label, never by a bare number that drifts when the page changes,
and every label they name exists on the chapter's page."""
import json
import re

import pytest

from icmlbook.claims import CHAPTERS, notebook_name

from book import ROOT

REF = re.compile(r"\bEqs?\.?\s*\(([^()]*)\)(?:\s*[-–]\s*\(([^()]*)\))?")


def labels(slug: str) -> set[str]:
    "Every equation, theorem or section label defined on the chapter's page."
    nb = json.loads((ROOT / "nbs" / notebook_name(slug)).read_text(encoding="utf-8"))
    md = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    return set(re.findall(r"\$\$\s*\(([\w:-]+)\)", md)) | set(re.findall(r":label:\s*([\w:-]+)", md)) | \
        set(re.findall(r"^\(([\w:-]+)\)=", md, re.M))


def references(slug: str) -> list[str]:
    "The equation references in the chapter's module: 'Eq. (label)', 'Eqs. (a)-(b)', or a bare 'Eq. (4)'."
    text = (ROOT / "icmlbook" / f"{slug}.py").read_text(encoding="utf-8")
    return [r.strip() for m in REF.finditer(text) for g in m.groups() if g is not None for r in g.split(",")]


def test_the_reader_finds_bare_numbers_and_labels():
    found = [r for m in REF.finditer("Eq. (4); Eqs. (sd-eq-dim)-(sd-eq-modulate), Eq (7)") for r in m.groups() if r]
    assert found == ["4", "sd-eq-dim", "sd-eq-modulate", "7"]
    assert (ROOT / "icmlbook" / "lgdea.py").exists() and "lgdea-eq-nce" in labels("lgdea")


@pytest.mark.parametrize("slug", [s for s, _ in CHAPTERS if (ROOT / "nbs" / notebook_name(s)).exists()])
def test_equation_references_resolve_to_labels_on_the_page(slug):
    refs, defined = references(slug), labels(slug)
    bare = [r for r in refs if re.fullmatch(r"\d+[a-z]?", r.strip())]
    assert bare == [], f"icmlbook.{slug} cites equations by number {bare}: cite them by label, e.g. Eq. ({slug}-eq-...)"
    unknown = sorted({r for r in refs if r not in defined})
    assert unknown == [], f"icmlbook.{slug} cites labels that are not on its page: {unknown}"
