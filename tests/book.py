"""What the browser and link tests know about the built book."""
import json
import os
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
HTML = ROOT / "_build" / "html"


def toc_pages() -> list[str]:
    "The book's pages in reading order, as paths relative to the repository (no suffix)."
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    return [toc["root"]] + [c["file"] for part in toc["parts"] for c in part["chapters"]]


def source(page: str) -> Path:
    return next(p for p in ((ROOT / page).with_suffix(s) for s in (".ipynb", ".md")) if p.exists())


def markdown_text(page: str) -> str:
    path = source(page)
    if path.suffix == ".md":
        return path.read_text(encoding="utf-8")
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def has_maths(page: str) -> bool:
    text = markdown_text(page)
    return bool(re.search(r"\$[^$\n]+\$|\$\$|\\begin\{|\{math\}", text))


def require_built_book() -> None:
    "Skip when the book was not built, except under `make test` (which builds it first): fail there."
    if (HTML / "index.html").exists():
        return
    if os.environ.get("ICMLBOOK_BOOK_BUILT") == "1":
        pytest.fail("_build/html/index.html is missing although `make test` built the book")
    pytest.skip("the book is not built: run `make test` or `make book` first")
