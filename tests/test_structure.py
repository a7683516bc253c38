"""Every chapter notebook has the sections of ../shared/CHAPTER.md, exports its module, and is in the toc."""
import configparser
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from icmlbook.claims import CHAPTERS, notebook_name

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ["The idea", "Theory", "Implementation", "Tests", "Experiment", "Claim check",
            "Deviations from the paper", "References"]
PARTS = {"Theory": range(1, 4), "Optimization and alignment": range(4, 9), "Graphs and fairness": range(9, 10),
         "Vision, language and multimodal": range(10, 15), "Signals, time series and the brain": range(15, 20)}
CHAPTER_NBS = sorted(p for p in (ROOT / "nbs").glob("[0-9][0-9]_*.ipynb") if not p.name.startswith("00_"))


def cells(path: Path) -> list[dict]:
    return [{**c, "source": "".join(c["source"])} for c in json.loads(path.read_text(encoding="utf-8"))["cells"]]


def toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    return [toc["root"]] + [c["file"] for part in toc["parts"] for c in part["chapters"]]


def test_chapter_notebooks_are_named_by_the_book_table():
    slugs = [s for s, _ in CHAPTERS]
    for nb in CHAPTER_NBS:
        slug = nb.stem[3:]
        assert slug in slugs, f"{nb.name}: unknown chapter slug {slug!r}"
        assert nb.name == notebook_name(slug), f"{nb.name} should be named {notebook_name(slug)}"


@pytest.mark.parametrize("nb", CHAPTER_NBS, ids=lambda p: p.name)
def test_chapter_has_sections_in_order(nb):
    heads = [m.group(1).strip() for c in cells(nb) if c["cell_type"] == "markdown"
             for m in re.finditer(r"^## (.+)$", c["source"], re.M)]
    found = [h for h in heads if h in SECTIONS]
    assert found == SECTIONS, f"{nb.name}: sections {found}, expected {SECTIONS} in this order"
    first = cells(nb)[0]
    assert first["cell_type"] == "markdown" and first["source"].startswith("# "), f"{nb.name}: no title cell"
    assert "ICML 2026" in first["source"], f"{nb.name}: the header must name ICML 2026"


@pytest.mark.parametrize("nb", CHAPTER_NBS, ids=lambda p: p.name)
def test_chapter_exports_its_module_and_records_claims(nb):
    slug = nb.stem[3:]
    code = "\n".join(c["source"] for c in cells(nb) if c["cell_type"] == "code")
    assert re.search(rf"^#\| default_exp {slug}\s*$", code, re.M), f"{nb.name}: missing '#| default_exp {slug}'"
    assert "#| export" in code, f"{nb.name}: exports nothing"
    importlib.import_module(f"icmlbook.{slug}")
    assert f'ChapterRun("{slug}")' in code and "run.record(" in code and "run.finish()" in code, \
        f"{nb.name}: claims must be recorded through icmlbook.claims.ChapterRun"
    md = "\n".join(c["source"] for c in cells(nb) if c["cell_type"] == "markdown")
    assert "{admonition} Deviations from the paper" in md, f"{nb.name}: no deviations admonition"
    for other, _ in CHAPTERS:
        assert f"icmlbook.{other}" not in code or other == slug, f"{nb.name} imports chapter {other}"


@pytest.mark.parametrize("nb", sorted((ROOT / "nbs").glob("*.ipynb")), ids=lambda p: p.name)
def test_cell_ids_are_unique(nb):
    "nbformat 4.5 requires unique cell ids: its validator reports a duplicate (\"Non-unique cell id\") and, when asked to repair, renames it."
    ids = [c.get("id") for c in cells(nb)]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    assert not dup, f"{nb.name}: duplicate cell ids {dup}"


@pytest.mark.parametrize("nb", CHAPTER_NBS, ids=lambda p: p.name)
def test_exported_code_comes_before_the_experiment(nb):
    "Library code is tested where it is defined; the mutation tests (tools/mutate.py) run only the cells before it."
    cs = cells(nb)
    exp = next(i for i, c in enumerate(cs) if c["cell_type"] == "markdown" and re.search(r"^## Experiment", c["source"], re.M))
    late = [i for i, c in enumerate(cs[exp:], exp) if c["cell_type"] == "code" and re.search(r"^#\| *export", c["source"], re.M)]
    assert not late, f"{nb.name}: export cells {late} after the Experiment heading: move them, with their tests, before it"


def test_every_module_imports():
    for py in (ROOT / "icmlbook").glob("*.py"):
        importlib.import_module(f"icmlbook.{py.stem}")


def test_toc_lists_exactly_the_pages_that_exist():
    listed = toc_files()
    for f in listed:
        assert any((ROOT / f).with_suffix(s).exists() for s in (".ipynb", ".md")), f"toc entry {f} does not exist"
    pages = {f"nbs/{p.stem}" for p in (ROOT / "nbs").iterdir() if p.suffix in (".ipynb", ".md")}
    assert pages == set(listed), f"in nbs/ but not in the toc: {pages - set(listed)}"
    assert listed[0] == "nbs/index" and listed[-1] == "nbs/scoreboard", "the scoreboard is the last page"


def test_toc_parts_hold_their_chapters_in_order():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    for part in toc["parts"]:
        nums = [int(Path(c["file"]).name[:2]) for c in part["chapters"] if re.match(r"\d\d_", Path(c["file"]).name)]
        if part["caption"] in PARTS:
            assert nums and all(n in PARTS[part["caption"]] for n in nums), f"part {part['caption']}: {nums}"
            assert nums == sorted(nums)
    captions = [p["caption"] for p in toc["parts"]]
    order = [c for c in PARTS if c in captions]
    assert [c for c in captions if c in PARTS] == order


def load_tool(name: str):
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"icmlbook_tools_{name}", ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_repository_url_is_kept_in_one_place():
    "settings.ini names the repository; the book's buttons and links take it from there, and no config repeats it."
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    ini = configparser.ConfigParser(delimiters=["="])
    ini.read(ROOT / "settings.ini")
    url = ini["DEFAULT"]["git_url"]
    assert "url" not in cfg["repository"]
    book = load_tool("book")
    assert book.book_config("off")["repository"]["url"] == url
    for f in [ROOT / "_config.yml", *(ROOT / ".github" / "workflows").glob("*.yaml"), ROOT / "Makefile"]:
        assert url not in f.read_text(encoding="utf-8"), f"{f.name} writes the repository's address again"


def test_readme_is_generated_from_the_front_page():
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "readme.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
