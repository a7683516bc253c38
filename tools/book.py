"""Build the book with an execution mode chosen on the command line.

    python tools/book.py --execute off -- --all -W -n --keep-going
    python tools/book.py --execute off --page nbs/04_bas.ipynb -- -W -n --keep-going   # one page
    python tools/book.py --execute cache --expect-cached -- --all -W -n --keep-going

With --expect-cached the build fails if it had to execute any notebook other than those whose metadata
forces execution (the scoreboard and the execution statistics): `make test` uses it right after
tools/nbtest.py has filled the cache, so that no chapter is ever executed twice in CI.

writes _build/_config.<mode>.yml (the book's _config.yml with `execute.execute_notebooks` set to the
mode and its paths made absolute) and runs `jupyter-book build <book or page> --config <that file>`
followed by the arguments after `--`. _config.yml stays the one source of the book's settings.
A page is built into _build/_page/<name>/.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--execute", choices=["off", "cache", "force", "auto"], required=True)
    p.add_argument("--page", type=Path, default=None, help="build this one page instead of the book")
    p.add_argument("--expect-cached", action="store_true", help="fail if a notebook had to be executed")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="arguments passed on to jupyter-book build")
    args = p.parse_args()
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    config["execute"]["execute_notebooks"] = args.execute
    ext = config["sphinx"].get("local_extensions", {})
    config["sphinx"]["local_extensions"] = {k: str((ROOT / v).resolve()) for k, v in ext.items()}
    config["bibtex_bibfiles"] = [str(ROOT / f) for f in config["bibtex_bibfiles"]]
    if config.get("html", {}).get("favicon"):
        config["html"]["favicon"] = str(ROOT / config["html"]["favicon"])
    sphinx = config["sphinx"]["config"]
    sphinx["html_static_path"] = [str(ROOT / f) for f in sphinx["html_static_path"]]
    out = ROOT / "_build" / f"_config.{args.execute}.yml"
    out.parent.mkdir(exist_ok=True)
    out.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    rest = [a for a in args.rest if a != "--"]
    cmd = [str(Path(sys.executable).parent / "jupyter-book"), "build", str(args.page.resolve() if args.page else ROOT), "--config", str(out), *rest]
    print("+", " ".join(cmd), flush=True)
    if not args.expect_cached:
        return subprocess.call(cmd, cwd=ROOT)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    executed = []
    for line in proc.stdout:
        print(line, end="", flush=True)
        if ": Executing notebook" in line:
            executed.append(Path(line.split(": Executing notebook")[0].strip()))
    code = proc.wait()
    unexpected = [p.name for p in executed if not forced(p)]
    if unexpected:
        print(f"FAILED: the book build executed {', '.join(unexpected)} again; tools/nbtest.py should have "
              "cached it (did its code change after the test run?)", file=sys.stderr)
        return code or 1
    return code


def forced(path: Path) -> bool:
    "Whether a notebook's own metadata asks for execution in every build."
    meta = json.loads(path.read_text(encoding="utf-8")).get("metadata", {})
    return meta.get("mystnb", {}).get("execution_mode") == "force"


if __name__ == "__main__":
    sys.exit(main())
