"""The confirm workflow's job matrix: one (chapter, confirm seed) pair per job, from the chapters' registries.

    python tools/confirm_matrix.py --chapters data_pricing,bas [--seeds 1000,1001 | --rehearse]

prints `matrix=<json>` for $GITHUB_OUTPUT (with --rehearse, one job per chapter: its rehearsal, seed "rehearsal"). Needs only PyYAML: the registries' `seeds.confirm` (per-claim confirm
seeds are a subset of them). A seed that is not one of a chapter's confirm seeds is refused.
"""
import argparse
import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def matrix(chapters: list[str], seeds: list[int] | None = None, rehearse: bool = False) -> dict:
    if rehearse and seeds:
        raise SystemExit("a rehearsal runs every development seed: --seeds and --rehearse do not go together")
    include = []
    for slug in chapters:
        path = ROOT / "nbs" / "claims" / f"{slug}.yml"
        if not path.is_file():
            raise SystemExit(f"chapter {slug!r} has no registry nbs/claims/{slug}.yml")
        confirm = yaml.safe_load(path.read_text(encoding="utf-8"))["seeds"]["confirm"]
        if seeds and (bad := sorted(set(seeds) - set(confirm))):
            raise SystemExit(f"seeds {bad} are not confirm seeds of {slug!r} ({confirm})")
        include += [{"chapter": slug, "seed": "rehearsal"}] if rehearse else \
            [{"chapter": slug, "seed": s} for s in (seeds or confirm)]
    return {"include": include}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--chapters", required=True)
    p.add_argument("--seeds", default="")
    p.add_argument("--rehearse", action="store_true", help="one rehearsal job per chapter instead of its seed jobs")
    a = p.parse_args()
    chapters = [c.strip() for c in a.chapters.split(",") if c.strip()]
    seeds = [int(s) for s in a.seeds.split(",") if s.strip()] or None
    print("matrix=" + json.dumps(matrix(chapters, seeds, a.rehearse)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
