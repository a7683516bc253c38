"""Sphinx extension: hide nbdev's directive comments from the book's readers.

Cells whose directives include `default_exp` or `hide` are removed from the page (input and output);
in every other code cell the `#|` directive lines (`#| export`, `#| slow`, ...) are dropped from the
displayed source. The notebooks themselves keep their directives: nbdev needs them.
"""
from docutils import nodes

_DROP_CELL = ("default_exp", "hide")


def _directives(source: str) -> list[str]:
    return [line[2:].strip().split()[0] for line in source.splitlines()
            if line.startswith("#|") and line[2:].strip()]


def strip_nbdev_directives(app, doctree) -> None:
    for cell in list(doctree.findall(lambda n: isinstance(n, nodes.container)
                                     and n.get("nb_element") == "cell_code")):
        code = next(iter(cell.findall(nodes.literal_block)), None)
        if code is None:
            continue
        source = code.astext()
        if any(d in _DROP_CELL for d in _directives(source)):
            cell.parent.remove(cell)
            continue
        if "#|" in source:
            kept = "\n".join(l for l in source.splitlines() if not l.startswith("#|")).lstrip("\n")
            code.children = [nodes.Text(kept)]
            code.rawsource = kept


def setup(app):
    app.connect("doctree-read", strip_nbdev_directives)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}
