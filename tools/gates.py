"""The two nbdev cleanliness gates of `make test`.

1. Notebooks are clean: `nbdev_clean` changes no file in nbs/.
2. The package is in sync: `nbdev_export` changes no file in icmlbook/ (nor pyproject.toml).

Each gate compares file contents before and after the command, so it works in a fresh clone and in a
working tree with uncommitted edits alike. A failing gate names the files and leaves them as the tool
wrote them, ready to commit.
"""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def snapshot(paths):
    return {p: p.read_bytes() for p in paths if p.is_file()}


def gate(name, cmd, files):
    before = snapshot(files())
    subprocess.run([str(BIN / cmd)], cwd=ROOT, check=True)
    after = snapshot(files())
    changed = sorted(str(p.relative_to(ROOT)) for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    if changed:
        print(f"FAILED {name}: `{cmd}` changed {', '.join(changed)}; commit the result.", file=sys.stderr)
        return False
    print(f"ok: {name}")
    return True


def main() -> int:
    ok = gate("notebooks clean", "nbdev_clean", lambda: (ROOT / "nbs").glob("*.ipynb"))
    ok &= gate("package in sync", "nbdev_export",
               lambda: [*(ROOT / "icmlbook").glob("*.py"), ROOT / "pyproject.toml"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
