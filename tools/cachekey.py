"""Where the book's execution cache lives: one jupyter-cache folder per scale and code version.

    _build/.jupyter_cache/<scale>-<first 12 hex digits of the key>

The key is the SHA-256 of the scale (ICMLBOOK_SCALE, default "ci") and of the files every chapter's results
depend on besides its own notebook: icmlbook/core.py, icmlbook/claims.py and each claims registry file
nbs/claims/*.yml (sorted by name). jupyter-cache keys a notebook by its code cells only, so without this an
`ICMLBOOK_SCALE=full make book`, or a change to the ledger code, would render outputs computed before it.
tools/nbtest.py (which fills the cache) and tools/book.py (which reads it) both take the folder from here.

ICMLBOOK_CACHE_ROOT moves the parent folder (the tests use it to build into a temporary one).
"""
import hashlib
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SCALE = "ci"


def keyed_files(root: Path = ROOT) -> list[Path]:
    "The files whose content is part of the key, in a fixed order."
    return [root / "icmlbook" / "core.py", root / "icmlbook" / "claims.py",
            *sorted((root / "nbs" / "claims").glob("*.yml"), key=lambda p: p.name)]


def current_scale() -> str:
    scale = os.environ.get("ICMLBOOK_SCALE", DEFAULT_SCALE)
    if not re.fullmatch(r"[A-Za-z0-9_-]+", scale):
        raise ValueError(f"ICMLBOOK_SCALE={scale!r} cannot name a cache folder")
    return scale


def cache_key(scale: str | None = None, root: Path = ROOT) -> str:
    "The SHA-256 (hex) of the scale and of each keyed file's path and content."
    scale = current_scale() if scale is None else scale
    h = hashlib.sha256(f"scale={scale}\n".encode())
    for path in keyed_files(root):
        content = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "absent"
        h.update(f"{path.relative_to(root).as_posix()}={content}\n".encode())
    return h.hexdigest()


def cache_dir(scale: str | None = None, root: Path = ROOT) -> Path:
    "The jupyter-cache folder for this scale and this version of the keyed files."
    scale = current_scale() if scale is None else scale
    parent = Path(os.environ.get("ICMLBOOK_CACHE_ROOT") or root / "_build" / ".jupyter_cache")
    return parent / f"{scale}-{cache_key(scale, root)[:12]}"


if __name__ == "__main__":
    print(cache_dir())
