"""Sphinx extension: the Colab launch button of a page opens its Colab-ready copy in colab/.

sphinx-book-theme points the button at the page's source notebook (nbs/NN_slug.ipynb); tools/colab.py
writes colab/NN_slug.ipynb with an install cell and without nbdev's directives, and this rewrites the
button's address to it.
"""


def _rewrite(buttons: list, colab_url: str) -> None:
    for b in buttons:
        _rewrite(b.get("buttons", []), colab_url)
        url = b.get("url", "")
        if url.startswith(colab_url) and "/nbs/" in url:
            b["url"] = url.replace("/nbs/", "/colab/", 1)


def point_colab_at_copies(app, pagename, templatename, context, doctree) -> None:
    colab_url = (app.config.html_theme_options.get("launch_buttons") or {}).get("colab_url")
    if colab_url and "header_buttons" in context:
        _rewrite(context["header_buttons"], colab_url)


def setup(app):
    app.connect("html-page-context", point_colab_at_copies, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}
