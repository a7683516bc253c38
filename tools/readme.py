"""Write README.md from the markdown cells of nbs/index.ipynb (the front page is the README's source).

    python tools/readme.py          # rewrite README.md
    python tools/readme.py --check  # exit 1 if README.md is out of date

Links to notebooks (`](04_bas.ipynb)`) are rewritten to point into nbs/, MyST citation roles are shown as plain
text, and the workflows' status badges (tests, book, last confirmation) go under the title, so the README reads well
on a code host.
"""
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def render() -> str:
    nb = json.loads((ROOT / "nbs" / "index.ipynb").read_text(encoding="utf-8"))
    text = "\n\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    text = re.sub(r"\]\((?!https?:)([\w.-]+?)(\.ipynb)?\)", lambda m: f"](nbs/{m.group(1)}.ipynb)", text)
    text = re.sub(r"\{cite(?::\w+)?\}`([^`]+)`", r"[\1]", text)
    title, _, rest = text.partition("\n")
    return ("<!-- Generated from nbs/index.ipynb by `make readme`; edit the notebook, not this file. -->\n\n"
            + title + "\n\n" + badges() + "\n" + rest + "\n")


def badges() -> str:
    "The status badges of the three workflows, for the repository settings.ini names (the one place it is written)."
    import configparser
    ini = configparser.ConfigParser(delimiters=["="])
    ini.read(ROOT / "settings.ini")
    url = ini["DEFAULT"]["git_url"]
    return " ".join(f"[![{name}]({url}/actions/workflows/{file}/badge.svg)]({url}/actions/workflows/{file})"
                    for name, file in (("tests", "test.yaml"), ("book", "deploy.yaml"), ("last confirmation", "confirm.yaml")))


def main() -> int:
    readme = ROOT / "README.md"
    if "--check" in sys.argv:
        if readme.read_text(encoding="utf-8") != render():
            print("README.md is out of date with nbs/index.ipynb: run `make readme`", file=sys.stderr)
            return 1
        return 0
    readme.write_text(render(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
