"""Agreement of two judges on the same inputs (issue 15: the second embedded judge).

    python benchmarks/judge_agreement.py --stepgap runs/i15/stepgap_smol runs/i15/stepgap_gemma
    python benchmarks/judge_agreement.py --frs runs/i15/frs_smol runs/i15/frs_gemma

`--stepgap A B`: Cohen's kappa between the step labels (`labels.jsonl` of two `procrl stepgap-eval` runs on the same
annotated set; the full tree's labels), plus each run's agreement with the gold labels. `--frs A B`: Spearman's rank
correlation between the reasoning scores RS (and RS from expected scores, where both runs have them) of the traces
both runs judged (`judged_traces.jsonl` of two `procrl frs` runs on the same traces: copy the first run's sample
store `cache/` into the second output directory first). Prints one line per statistic; `--json` prints a JSON object
instead.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import sys
from pathlib import Path


def cohen_kappa(a: list[str], b: list[str]) -> float | None:
    """Cohen's kappa of two label lists of equal length: (p_o - p_e) / (1 - p_e); None when empty or when p_e = 1
    (both raters always give the same single label).

    >>> cohen_kappa(["x", "x", "y", "y"], ["x", "y", "y", "y"])  # p_o = 3/4, p_e = 1/2*1/4 + 1/2*3/4 = 1/2
    0.5
    """
    if len(a) != len(b):
        raise ValueError(f"cohen_kappa: {len(a)} labels vs {len(b)}")
    n = len(a)
    if n == 0:
        return None
    p_o = sum(x == y for x, y in zip(a, b, strict=True)) / n
    ca, cb = collections.Counter(a), collections.Counter(b)
    p_e = sum(ca[k] * cb[k] for k in ca) / (n * n)
    return None if p_e == 1 else (p_o - p_e) / (1 - p_e)


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):  # ties share their mean rank (1-based)
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(a: list[float], b: list[float]) -> float | None:
    """Spearman's rho: the Pearson correlation of the (tie-averaged) ranks; None with < 2 pairs or a constant side.

    >>> spearman([1, 2, 3, 4], [10, 20, 40, 30])
    0.8
    """
    if len(a) != len(b):
        raise ValueError(f"spearman: {len(a)} values vs {len(b)}")
    if len(a) < 2:
        return None
    ra, rb = _ranks(list(a)), _ranks(list(b))
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    va, vb = sum((x - ma) ** 2 for x in ra), sum((y - mb) ** 2 for y in rb)
    if va == 0 or vb == 0:
        return None
    return round(cov / math.sqrt(va * vb), 12)


def stepgap_agreement(dir_a: Path, dir_b: Path) -> dict:
    """Kappa between two stepgap-eval runs' labels, and each run's kappa with gold."""
    rows_a = [json.loads(line) for line in (dir_a / "labels.jsonl").read_text().splitlines() if line.strip()]
    rows_b = [json.loads(line) for line in (dir_b / "labels.jsonl").read_text().splitlines() if line.strip()]
    keys_a = [(r["question"], r["step"]) for r in rows_a]
    if keys_a != [(r["question"], r["step"]) for r in rows_b]:
        raise SystemExit("the two runs labelled different steps (different --data or --limit)")
    pred_a, pred_b = [r["pred"] for r in rows_a], [r["pred"] for r in rows_b]
    gold = [r["gold"] for r in rows_a]
    return {
        "steps": len(rows_a),
        "kappa_a_b": cohen_kappa(pred_a, pred_b),
        "raw_agreement_a_b": sum(x == y for x, y in zip(pred_a, pred_b, strict=True)) / max(len(rows_a), 1),
        "kappa_a_gold": cohen_kappa(pred_a, gold),
        "kappa_b_gold": cohen_kappa(pred_b, gold),
        "labels_a": dict(collections.Counter(pred_a)),
        "labels_b": dict(collections.Counter(pred_b)),
    }


def _judged(path: Path) -> dict[tuple[str, str], dict]:
    lines = (path / "judged_traces.jsonl").read_text().splitlines()  # procrl frs: every trace with its judgement
    traces = [json.loads(line) for line in lines if line.strip()]
    return {(t["problem_id"], t["completion"]): t for t in traces if t.get("scores") is not None}


def frs_agreement(dir_a: Path, dir_b: Path) -> dict:
    """Spearman between two FRS runs' RS (and expected RS) on the traces both judged."""
    a, b = _judged(dir_a), _judged(dir_b)
    both = sorted(set(a) & set(b))
    out = {"judged_a": len(a), "judged_b": len(b), "judged_both": len(both)}
    out["spearman_rs"] = spearman([a[k]["rs"] for k in both], [b[k]["rs"] for k in both])
    pairs = [(a[k].get("rs_expected"), b[k].get("rs_expected")) for k in both]
    pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
    out["spearman_rs_expected"] = spearman([x for x, _ in pairs], [y for _, y in pairs])
    out["pairs_rs_expected"] = len(pairs)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stepgap", nargs=2, type=Path, metavar=("RUN_A", "RUN_B"), help="two stepgap-eval dirs")
    parser.add_argument("--frs", nargs=2, type=Path, metavar=("RUN_A", "RUN_B"), help="two procrl frs dirs")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if not args.stepgap and not args.frs:
        parser.error("give --stepgap A B and/or --frs A B")
    result = {}
    if args.stepgap:
        result["stepgap"] = stepgap_agreement(*args.stepgap)
    if args.frs:
        result["frs"] = frs_agreement(*args.frs)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for part, stats in result.items():
            for key, value in stats.items():
                print(f"{part} {key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
