"""`nbdev_test` that keeps what it executed, so the book does not execute the notebooks a second time.

    python tools/nbtest.py [nbdev_test arguments]

runs nbdev's own `nbdev_test` (same flags, same skipped `#| slow` cells, same failures) with one addition:
each notebook that passes is written, with the outputs nbdev's shell captured, into the book's execution
cache (_build/.jupyter_cache, the cache Jupyter Book reads with `execute_notebooks: cache`). A book build
right after it finds every notebook in the cache and renders those outputs instead of re-running it.
"""
import sys
import tempfile
from pathlib import Path

import nbdev.test
from execnb.shell import CaptureShell

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "_build" / ".jupyter_cache"
_run_all, _set_path = CaptureShell.run_all, CaptureShell.set_path


def set_path(self, path):
    self.notebook_path = Path(path)
    return _set_path(self, path)


def run_all(self, nb, *args, **kwargs):
    _run_all(self, nb, *args, **kwargs)  # raises on a failing cell: nothing is cached then
    path = getattr(self, "notebook_path", None)
    if path is None or self.exc is not None:
        return
    import nbformat
    from jupyter_cache import get_cache
    # nbdev's reader strips the `#|` lines from the cells it runs; put the outputs back into the notebook
    # as it is on disk, so the cache's hash of the code cells matches the book's.
    source = nbformat.read(path, as_version=4)
    count = 0
    for cell in nb.cells:
        outputs = cell.get("outputs")
        if cell.cell_type == "code" and outputs:
            count += 1
            target = source.cells[cell.idx_]
            target.outputs = [nbformat.from_dict(dict(o)) for o in outputs]
            for o in target.outputs:
                if o.output_type == "execute_result":
                    o.execution_count = count
            target.execution_count = count
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / path.name
        nbformat.write(source, out)
        get_cache(str(CACHE)).cache_notebook_file(str(out), uri=str(path), check_validity=False, overwrite=True)


CaptureShell.set_path, CaptureShell.run_all = set_path, run_all

if __name__ == "__main__":
    sys.argv[0] = "nbdev_test"
    sys.exit(nbdev.test.nbdev_test())
