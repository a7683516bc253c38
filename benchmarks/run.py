"""Run the benchmarks: `python benchmarks/run.py [--tiny] [case ...]` (what `make bench` calls).

Writes _build/bench/bench.json and _build/bench/bench.md; the book's Performance appendix reads the JSON.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cases  # noqa: E402,F401  (registers the cases)
from harness import CASES, OUT, run  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("cases", nargs="*", help=f"cases to run (default: all of {sorted(CASES)})")
    p.add_argument("--tiny", action="store_true", help="one run at a tiny size per case (a smoke test)")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args()
    results = run(args.cases or None, tiny=args.tiny, out=args.out)
    print((args.out / "bench.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
