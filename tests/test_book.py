"""The book's configuration and the extension that hides nbdev directives."""
import sys
from pathlib import Path

import yaml
from docutils import nodes
from docutils.utils import new_document
from docutils.frontend import get_default_settings
from docutils.parsers.rst import Parser

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "_ext"))
from nbdev_directives import strip_nbdev_directives  # noqa: E402


def config():
    return yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))


def test_config_has_what_the_book_needs():
    c = config()
    assert c["only_build_toc_files"] is True
    assert c["execute"]["execute_notebooks"] == "cache" and c["execute"]["timeout"] > 0
    assert "sphinx_proof" in c["sphinx"]["extra_extensions"]
    assert c["bibtex_bibfiles"] == ["references.bib"] and (ROOT / "references.bib").exists()
    assert c["launch_buttons"]["colab_url"] and c["repository"]["branch"] == "main"
    assert {"amsmath", "dollarmath", "colon_fence"} <= set(c["parse"]["myst_enable_extensions"])
    for pattern in ("_build", ".venv", "icmlbook", "tests", ".mathjax", ".actionlint"):  # folders make fills
        assert pattern in c["exclude_patterns"]


def test_mathjax_is_served_locally():
    c = config()["sphinx"]["config"]
    assert not c["mathjax_path"].startswith("http"), "MathJax must not come from a CDN"
    assert c["html_static_path"][0] == ".mathjax/static" and c["html_css_files"] == ["icmlbook.css"]
    assert "mathjax@3" in (ROOT / "Makefile").read_text()


def test_scoreboard_page_is_always_executed():
    import json
    meta = json.loads((ROOT / "nbs" / "scoreboard.ipynb").read_text())["metadata"]
    assert meta["mystnb"]["execution_mode"] == "force"


def cell(source: str) -> nodes.container:
    c = nodes.container(nb_element="cell_code")
    src = nodes.container(nb_element="cell_code_source")
    src += nodes.literal_block(source, source)
    c += src
    c += nodes.container("", nodes.literal_block("out", "out"), nb_element="cell_code_output")
    return c


def test_directives_are_hidden_from_readers():
    doc = new_document("test", get_default_settings(Parser))
    for s in ("#| default_exp bas", "#| hide\nfrom fastcore.test import *", "#| export\ndef f(): pass",
              "x = 1  # a comment\n#|not-a-directive-line-start"):
        doc += cell(s)
    strip_nbdev_directives(None, doc)
    shown = [c.next_node(nodes.literal_block).astext() for c in doc.children]
    assert shown == ["def f(): pass", "x = 1  # a comment"]
