"""Compare GRPO runs of the same seed: before/after accuracy, the first step's rewards and advantages, and the loss.

    python benchmarks/compare_demo_runs.py RUN_DIR RUN_DIR ...

Reads each run's `run.json` (metrics, history, git commit, wall time) and `completions.jsonl` (the first step's
completions with their rewards). Used to show that a change left the demo's numbers unchanged.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def summarize(run_dir: Path) -> list[str]:
    """The lines printed for one run directory."""
    run = json.loads((run_dir / "run.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "completions.jsonl").read_text().splitlines() if line.strip()]
    evals = {k.split("/")[-1]: v for k, v in run["metrics"].items() if k.startswith("eval/")}
    step1 = [r for r in rows if r["step"] == 1 and r["mode"] == "train"]
    lines = [f"== {run_dir}: commit {(run.get('git') or {}).get('commit', '?')[:7]}, wall {run['wall_time_s']:.0f} s"]
    lines.append(f"   eval: {evals}")
    for name in step1[0]["rewards"] if step1 else []:
        values = [None if r["rewards"][name] is None else round(r["rewards"][name], 4) for r in step1]
        lines.append(f"   step-1 {name}: {values}")
    lines.append(f"   step-1 advantages: {[round(r['advantage'], 4) for r in step1]}")
    lines.append(f"   loss per step: {[round(h['loss'], 4) for h in run['history'] if 'loss' in h]}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="run directories (each with run.json, completions.jsonl)")
    args = parser.parse_args(argv)
    for run_dir in args.runs:
        print("\n".join(summarize(run_dir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
