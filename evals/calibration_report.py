"""The calibration table and plot of one or several policies (`procrl calibrate`, and `procrl calibrate --combine`
over finished runs): one markdown row per (policy, level), each policy's edge levels, and per-sample accuracy
against the level, one line per policy (docs/architecture.md "Calibration").

A run is the `result` of a `run.json` that `procrl calibrate` wrote (`read_calibration_run`); `policies` below is
a list of `(label, result)` pairs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from procrl.evals.calibration import PASS_K
from procrl.evals.reporting import figure, markdown_table
from procrl.evals.stats import MISSING, format_estimate
from procrl.experiment.tracking import RUN_FILE

__all__ = [
    "TABLE_HEADER",
    "calibration_markdown",
    "calibration_rows",
    "plot_calibration",
    "read_calibration_run",
]

TABLE_HEADER = (
    "policy",
    "level",
    "per-sample acc [95% CI]",
    "greedy acc [95% CI]",
    f"pass@{PASS_K}",
    "mixed share",
    "ProcessAcc (samples / greedy)",
    "length (tokens)",
    "no answer",
    "SFT wall time",
    "edge",
)
_ALIGN = ("left", "left", "right", "right", "right", "right", "right", "right", "right", "right", "left")


def read_calibration_run(path: str | Path) -> dict:
    """The `result` of the finished `procrl calibrate` run in directory `path` (or its run.json).

    Raises:
        ValueError: no readable run.json, or a run of another command or one that did not finish (the message
            says what to give instead).
    """
    path = Path(path)
    record_path = path if path.name == RUN_FILE and path.is_file() else path / RUN_FILE
    try:
        record = json.loads(record_path.read_text())
        if record.get("command") != "calibrate" or record.get("status") != "finished":
            raise ValueError(f"a {record.get('status')} {record.get('command')!r} run, not a finished calibrate run")
        result = record["result"]
        if not isinstance(result, dict) or not isinstance(result.get("levels"), list):
            raise ValueError("its result holds no levels")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(
            f"{path}: not a readable `procrl calibrate` run ({error}); give directories `procrl calibrate "
            "--output-dir` wrote (each with its run.json)"
        ) from None
    return result


def _number(value: float | None, spec: str = ".3f") -> str | None:
    return None if value is None else f"{value:{spec}}"


def _wall(sft: dict | None) -> str | None:
    seconds = (sft or {}).get("wall_time_s")
    return None if seconds is None else f"{seconds:.0f} s"


def calibration_rows(policies: list[tuple[str, dict]]) -> list[list[str | None]]:
    """One row of `TABLE_HEADER` cells per (policy, level), in the given order; None: not measured or undefined.

    >>> m = {"per_sample_accuracy": 0.25, "per_sample_ci": [0.1, 0.4], "greedy_accuracy": 0.5, "greedy_ci": [0.2, 0.8],
    ...      "pass@8": 0.75, "mixed_share": 0.5, "process_acc": 0.4, "greedy_process_acc": None, "mean_length": 41.25,
    ...      "no_answer_share": 0.125}
    >>> calibration_rows([("sft", {"levels": [{"level": "arith-ops2-d2-test", "metrics": m, "edge": True}],
    ...                            "sft": {"wall_time_s": 95.4}})])[0]  # doctest: +NORMALIZE_WHITESPACE
    ['sft', 'arith-ops2-d2-test', '0.250 [0.100, 0.400]', '0.500 [0.200, 0.800]', '0.750', '0.500', '0.400 / –',
     '41.2', '0.125', '95 s', 'edge']
    """
    rows = []
    for label, result in policies:
        for level in result["levels"]:
            m = level["metrics"]
            process = (m.get("process_acc"), m.get("greedy_process_acc"))
            rows.append(
                [
                    label,
                    level["level"],
                    format_estimate(m["per_sample_accuracy"], m.get("per_sample_ci")),
                    format_estimate(m["greedy_accuracy"], m.get("greedy_ci")),
                    _number(m.get(f"pass@{PASS_K}")),
                    _number(m.get("mixed_share")),
                    None if process == (None, None) else " / ".join(_number(v) or MISSING for v in process),
                    _number(m.get("mean_length"), ".1f"),
                    _number(m.get("no_answer_share")),
                    _wall(result.get("sft")),
                    "edge" if level.get("edge") else "",
                ]
            )
    return rows


def _policy_line(label: str, result: dict) -> str:
    settings = result.get("settings") or {}
    edges = result.get("edge_levels") or []
    what = ", ".join(f"`{e}`" for e in edges) if edges else "none"
    sft = result.get("sft")
    provenance = ""
    if sft and "error" not in sft:
        provenance = (
            f"; SFT checkpoint `{sft.get('key')}` of {sft.get('base_model')} on {sft.get('dataset')}, "
            f"{sft.get('steps')} steps, {_wall(sft) or MISSING}"
        )
    sampling = (
        f"N = {settings.get('num_samples', MISSING)} samples at T = {settings.get('temperature', MISSING)}, "
        f"G = {settings.get('group_size', MISSING)}, {settings.get('n_problems', MISSING)} problems per level, "
        f"`{settings.get('prompt_template', MISSING)}` prompt, {settings.get('max_new_tokens', MISSING)} new tokens"
    )
    return f"- **{label}** (`{result.get('model')}`; {sampling}{provenance}): edge level {what}"


def calibration_markdown(
    policies: list[tuple[str, dict]],
    *,
    title: str = "Calibration",
    sources: Sequence[str] = (),
    plot: str | None = None,
) -> str:
    """The calibration page: `title`, the edge rule (of the first policy's run), one line per policy naming its edge
    levels and settings, the table (`calibration_rows`), the plot `plot` (a path relative to the page) and the run
    directories `sources` when given. Ends with a newline."""
    rule = (policies[0][1].get("edge_rule") if policies else None) or {}
    lines = [
        f"# {title}",
        "",
        f"Edge level: per-sample accuracy in [{rule.get('low', MISSING)}, {rule.get('high', MISSING)}] and "
        f"pass@{PASS_K} >= {rule.get('min_pass', MISSING)}. Per-sample accuracy: the mean over problems of each "
        "problem's share of correct samples (bootstrap 95% interval over problems); greedy: Wilson 95% interval; "
        "mixed share: problems whose first G samples are neither all right nor all wrong; ProcessAcc: the step "
        "oracle's mean; length: mean completion tokens; no answer: share of samples without an extractable answer.",
        "",
        *(_policy_line(label, result) for label, result in policies),
        "",
        markdown_table(TABLE_HEADER, calibration_rows(policies), align=_ALIGN),
    ]
    if plot:
        lines += ["", f"![per-sample accuracy by level]({plot})"]
    if sources:
        lines += ["", "Runs: " + ", ".join(f"`{s}`" for s in sources)]
    return "\n".join(lines) + "\n"


def plot_calibration(policies: list[tuple[str, dict]], path: str | Path) -> Path:
    """Per-sample accuracy (with its 95% interval as error bars) against the level, one line per policy; the levels
    on the x axis in their order of first appearance; the edge band [low, high] of the first policy's rule shaded.
    Returns `path` (a PNG)."""
    levels: list[str] = []
    for _, result in policies:
        levels += [lv["level"] for lv in result["levels"] if lv["level"] not in levels]
    rule = (policies[0][1].get("edge_rule") if policies else None) or {}
    with figure(path, figsize=(max(6.0, 1.2 * len(levels) + 2), 4.5)) as (fig, ax):
        if "low" in rule and "high" in rule:
            ax.axhspan(rule["low"], rule["high"], color="tab:green", alpha=0.12, label="edge band")
        for label, result in policies:
            points = [
                (levels.index(lv["level"]), lv["metrics"]["per_sample_accuracy"], lv["metrics"].get("per_sample_ci"))
                for lv in result["levels"]
                if lv["metrics"]["per_sample_accuracy"] is not None
            ]
            if not points:
                continue
            xs, ys, cis = zip(*points, strict=True)
            low = [y - (ci[0] if ci else y) for y, ci in zip(ys, cis, strict=True)]
            high = [(ci[1] if ci else y) - y for y, ci in zip(ys, cis, strict=True)]
            ax.errorbar(xs, ys, yerr=[low, high], marker="o", capsize=3, label=label)
        ax.set_xticks(range(len(levels)), levels, rotation=30, ha="right")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("level")
        ax.set_ylabel("per-sample accuracy")
        ax.legend(loc="best", fontsize="small")
        fig.tight_layout()
    return Path(path)
