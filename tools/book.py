"""Build the book with an execution mode chosen on the command line.

    python tools/book.py --execute off -- --all -W -n --keep-going
    python tools/book.py --execute off --page nbs/04_bas.ipynb -- -W -n --keep-going   # one page
    python tools/book.py --execute cache --expect-cached -- --all -W -n --keep-going

With --expect-cached the build fails if it executed any notebook other than those whose metadata forces
execution (the scoreboard and the execution statistics): `make test` uses it right after tools/nbtest.py has
filled the cache, so that no chapter is ever executed twice in CI. What was executed is read from the
jupyter-cache records before and after the build: a cache record that is new (or was re-created), or a
project record that is new or got a new traceback, is a notebook the build executed.

The build reads the book's _config.yml with `execute.execute_notebooks` set to the mode, `execute.cache` set to
the folder tools/cachekey.py names for the current scale and code (so `ICMLBOOK_SCALE=full make book` executes
again) and its paths made absolute; it writes that to a temporary file and runs
`jupyter-book build <book or page> --config <that file>` followed by the arguments after `--`.
_config.yml stays the one source of the book's settings. A page is built under _build/_page/ (jupyter-book
names the folder).
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cachekey import cache_dir  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def book_config(mode: str) -> dict:
    "The book's _config.yml for a build with execution `mode`, its paths absolute, its cache keyed."
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    config["execute"]["execute_notebooks"] = mode
    config["execute"]["cache"] = str(cache_dir())
    ext = config["sphinx"].get("local_extensions", {})
    config["sphinx"]["local_extensions"] = {k: str((ROOT / v).resolve()) for k, v in ext.items()}
    config["bibtex_bibfiles"] = [str(ROOT / f) for f in config["bibtex_bibfiles"]]
    if config.get("html", {}).get("favicon"):
        config["html"]["favicon"] = str(ROOT / config["html"]["favicon"])
    sphinx = config["sphinx"]["config"]
    sphinx["html_static_path"] = [str(ROOT / f) for f in sphinx["html_static_path"]]
    config.setdefault("repository", {})["url"] = repository_url()  # the Colab buttons and repository links
    return config


def repository_url() -> str:
    "The repository's address, from settings.ini's git_url: the one place it is written."
    import configparser
    ini = configparser.ConfigParser(delimiters=["="])
    ini.read(ROOT / "settings.ini")
    return ini["DEFAULT"]["git_url"]


class Snapshot(NamedTuple):
    "The records of a jupyter-cache at one moment."
    cache: dict   # (pk, hashkey, created) of each cached notebook -> its uri
    project: dict  # uri of each notebook staged for execution -> (pk, created, traceback)


def cache_snapshot(folder: Path) -> Snapshot:
    "The records of the jupyter-cache in `folder` (empty, and nothing created, when there is none)."
    if not (Path(folder) / "global.db").exists():
        return Snapshot({}, {})
    from jupyter_cache import get_cache
    cache = get_cache(str(folder))
    return Snapshot(
        cache={(r.pk, r.hashkey, r.created.isoformat()): r.uri for r in cache.list_cache_records()},
        project={r.uri: (r.pk, r.created.isoformat(), r.traceback or "") for r in cache.list_project_records()})


def executed_notebooks(before: Snapshot, after: Snapshot) -> list[str]:
    """The notebooks (uris, sorted) a build executed, from the cache's records before and after it.

    myst-nb, when it cannot take a notebook from the cache, stages it in the cache's project (a new project
    record, its traceback reset), executes it, then stores it as a new cache record (replacing the one with the
    same hash) or, when it failed, sets the project record's traceback. A lookup changes neither."""
    new = {uri for key, uri in after.cache.items() if key not in before.cache}
    staged = {uri for uri, rec in after.project.items() if before.project.get(uri) != rec}
    return sorted(new | staged)


def forced(path: Path) -> bool:
    "Whether a notebook's own metadata asks for execution in every build."
    meta = json.loads(Path(path).read_text(encoding="utf-8")).get("metadata", {})
    return meta.get("mystnb", {}).get("execution_mode") == "force"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--execute", choices=["off", "cache", "force", "auto"], required=True)
    p.add_argument("--page", type=Path, default=None, help="build this one page instead of the book")
    p.add_argument("--expect-cached", action="store_true", help="fail if a notebook had to be executed")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="arguments passed on to jupyter-book build")
    args = p.parse_args()
    config = book_config(args.execute)
    cache = Path(config["execute"]["cache"])
    cache.parent.mkdir(parents=True, exist_ok=True)
    rest = [a for a in args.rest if a != "--"]
    before = cache_snapshot(cache)
    # A temporary config file: builds running at the same time (a page, the book) cannot read each other's.
    with tempfile.TemporaryDirectory(prefix="icmlbook-config-") as tmp:
        out = Path(tmp) / f"_config.{args.execute}.yml"
        out.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        cmd = [str(Path(sys.executable).parent / "jupyter-book"), "build",
               str(args.page.resolve() if args.page else ROOT), "--config", str(out), *rest]
        print("+", " ".join(cmd), flush=True)
        print(f"execution cache: {cache}", flush=True)
        code = subprocess.call(cmd, cwd=ROOT)
    if not args.expect_cached:
        return code
    executed = executed_notebooks(before, cache_snapshot(cache))
    unexpected = [Path(uri).name for uri in executed if not (Path(uri).exists() and forced(Path(uri)))]
    if unexpected:
        print(f"FAILED: the book build executed {', '.join(unexpected)} (read from the execution cache {cache}); "
              "tools/nbtest.py should have cached it at this scale (did its code, icmlbook/core.py, "
              "icmlbook/claims.py or a claims registry change after the test run?)", file=sys.stderr)
        return code or 1
    return code


if __name__ == "__main__":
    sys.exit(main())
