"""Paired comparison of GRPO arms over seeds (issue 28 §3; docs/architecture.md "Reports"): each arm's final greedy
accuracy against a reference arm and against its placebo arm, on the same evaluation problems, pooled over seeds.

    variants = group_variants(load_runs([sweep_dir, pum_sweep_dir]))      # procrl.evals.run_report
    rows = compare_arms(variants, reference="outcome", placebos="oracle_shuffled,pum_mixed=pum_shuffled")
    text = format_arm_comparison(rows, reference="outcome")               # `procrl report --reference outcome`

An **arm** is a variant (the seeds of one setting). Its label is its `config` file's stem without the prefix all arms'
stems share up to an "_" (`arith_organism_oracle` -> `oracle`), else the variant's name (`arm_labels`).

**Pooled paired difference** of arm A against arm B on metric m (`pooled_difference`): for each problem i of the
evaluation set, d_i = mean over A's finished seeds of m_i − mean over B's finished seeds of m_i; the difference is
mean_i d_i, with the percentile-bootstrap 95% interval over problems (`procrl.evals.stats.bootstrap_mean_interval`,
1000 resamples). A seed's own difference is the mean over problems of (that seed's m_i − B's pooled m_i), so the
pooled difference is the mean of the seeds' differences when no value is missing. m is `correct` (greedy accuracy)
or a reward the evaluation recorded per problem (`oracle_process_reward`: ProcessAcc). The values are the first
after-training evaluation's `problems` (`procrl.evals.accuracy.EvalResult`, run.json's `result.after[0]`); a None
value (an unparseable gold, a reward that did not apply) leaves that run out for that problem, and a problem without
a value on either side is left out of n. The interval holds the problems fixed: it does not cover the spread over
seeds, which the seeds' own differences show.

**Decision** (`decide`): an arm is "supported" only when its pooled accuracy interval against the reference AND
against its placebo both lie above 0 (low end > 0) — or its ProcessAcc intervals, with `decide_on="process"`
(issue 28 §3 from the corrupted-step warm start, whose deficit is in its steps); "not supported" otherwise;
undecided ("no placebo arm", "no finished run") when either comparison is missing. The reference is "reference", a
placebo arm "placebo". With a pre-registered `margin` m > 0 (docs/results/README.md §3: "If outcome only already
lifts ProcessAcc to within 0.03 of the oracle arm, the claim is 'not supported' here too"), an arm whose pooled
difference against the reference (the point estimate, on the decision's metric) is strictly below m is "not
supported (within m of the reference)" even when both intervals lie above 0; m = 0, the default, applies the
intervals only.

**Stability** (`--stable ARM`, issue 28's process-only arm): the arm's own after − before difference (per problem,
the mean over its seeds of after-training minus before-training correctness, `pooled_difference` with
`other_when="before"`); "stable" when its interval's low end is at least −`STABILITY_MARGIN` (0.03) and the
divergence alarm fired in none of its runs, "not stable" otherwise ("undecided: alarm not recorded" for runs
without the alarm metric). Every arm's after − before difference is in the table.

**Divergence alarm** (`alarm_steps`): the logging steps at which `hacking/reward_accuracy_alarm` (procrl.trainers
.monitoring: the reward-accuracy correlation negative while the reward rises) turned on in the run's `history`,
i.e. where its warning fired; None for a run that did not record the key (older runs).

Only finished runs enter (`procrl.evals.run_report.Variant.finished`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from procrl.evals.reporting import markdown_table
from procrl.evals.run_report import Variant
from procrl.evals.stats import BOOTSTRAP_RESAMPLES, MISSING, bootstrap_mean_interval, mean_std
from procrl.experiment.tracking import is_number

__all__ = [
    "ALARM_KEY",
    "ArmRow",
    "DECIDE_ON",
    "PROCESS_ACC",
    "STABILITY_MARGIN",
    "PairedDifference",
    "alarm_steps",
    "arm_labels",
    "compare_arms",
    "decide",
    "format_arm_comparison",
    "parse_placebos",
    "per_problem",
    "pooled_difference",
]

ACCURACY = "correct"  # the per-problem key of greedy correctness (1.0 / 0.0 / None)
PROCESS_ACC = "oracle_process_reward"  # the step oracle's ProcessAcc as the evaluation records it per problem
ALARM_KEY = "hacking/reward_accuracy_alarm"
DECIDE_ON = ("accuracy", "process")  # what `decide` reads: greedy accuracy or ProcessAcc
STABILITY_MARGIN = 0.03  # "stable": the after - before interval does not lie below -0.03 (issue 28 §3)


@dataclass(frozen=True)
class PairedDifference:
    """Arm A minus arm B on one metric over the same problems (`pooled_difference`).

    Attributes:
        n: problems with a value on both sides. diff: the pooled difference (mean over problems).
        ci_low, ci_high: its percentile-bootstrap 95% interval over problems.
        per_seed: (seed, that seed's mean difference against B's pooled values; None when undefined), A's runs in order.
        seeds, other_seeds: A's and B's runs pooled.
    """

    n: int
    diff: float
    ci_low: float
    ci_high: float
    per_seed: tuple[tuple[Any, float | None], ...]
    seeds: int
    other_seeds: int

    @property
    def above_zero(self) -> bool:
        """Whether the whole interval lies above 0."""
        return self.ci_low > 0.0


def per_problem(run: dict[str, Any], key: str = ACCURACY, when: str = "after") -> tuple[str, dict[str, float | None]]:
    """(evaluation set name, {problem_id: value}) of the run's first evaluation `when` ("after" or "before"
    training); the value is the problem's `correct` for `key="correct"`, else its recorded reward `key`; None when
    absent or not finite.

    Raises:
        ValueError: the run has no such per-problem evaluation (`result.<when>[0].problems`), or a problem id repeats.
    """
    after = (run.get("result") or {}).get(when) or []
    problems = after[0].get("problems") if after and isinstance(after[0], dict) else None
    if not problems:
        raise ValueError(
            f"{run.get('path')}: no per-problem evaluation {when} training (result.{when}[0].problems); the paired "
            "comparison needs train_grpo.py runs with run_eval and eval_sets"
        )
    values: dict[str, float | None] = {}
    for problem in problems:
        pid = str(problem["problem_id"])
        if pid in values:
            raise ValueError(f"{run.get('path')}: problem {pid!r} is evaluated twice in {after[0].get('name')}")
        value = problem.get("correct") if key == ACCURACY else (problem.get("rewards") or {}).get(key)
        values[pid] = float(value) if is_number(value) else None
    return str(after[0].get("name")), values


def pooled_difference(
    runs: Sequence[dict[str, Any]],
    other_runs: Sequence[dict[str, Any]],
    key: str = ACCURACY,
    *,
    seeds: Sequence[Any] | None = None,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
    other_when: str = "after",
) -> PairedDifference | None:
    """The pooled paired difference of `runs` (arm A's seeds) against `other_runs` (arm B's) on `key` (module
    docstring); None when no problem has a value on both sides (undefined, not 0).

    Args:
        runs, other_runs: run records (run.json dicts with `path`), at least one each.
        key: "correct" or a reward name recorded per problem.
        seeds: the labels of `runs` in `per_seed` (default 0, 1, ...).
        resamples, seed: of the bootstrap.
        other_when: which evaluation of `other_runs` ("after", or "before": with `other_runs` = `runs`, the arm's
            own after − before difference).

    Raises:
        ValueError: no run on a side, a run without a per-problem evaluation, or runs that evaluated another set or
            other problems (the comparison would not be paired).
    """
    if not runs or not other_runs:
        raise ValueError("a paired difference needs at least one finished run on each side")
    tables = [(run, *per_problem(run, key)) for run in runs]
    tables += [(run, *per_problem(run, key, other_when)) for run in other_runs]
    first, first_set, first_values = tables[0]
    for run, name, values in tables[1:]:
        if name != first_set or values.keys() != first_values.keys():
            missing, extra = len(first_values.keys() - values.keys()), len(values.keys() - first_values.keys())
            raise ValueError(
                f"{run.get('path')} and {first.get('path')} evaluated different problems ({name!r}: {missing} of "
                f"{first_set!r}'s {len(first_values)} missing, {extra} others): a paired comparison needs the same "
                "eval set in every run; rerun them with the same eval_sets"
            )
    own, other = [t[2] for t in tables[: len(runs)]], [t[2] for t in tables[len(runs) :]]
    own_mean, other_mean = _means(own), _means(other)
    ids = [pid for pid in first_values if own_mean[pid] is not None and other_mean[pid] is not None]
    if not ids:
        return None
    diffs = [own_mean[pid] - other_mean[pid] for pid in ids]
    low, high = bootstrap_mean_interval(diffs, resamples=resamples, seed=seed)
    labels = list(seeds) if seeds is not None else list(range(len(runs)))
    per_seed = []
    for label, values in zip(labels, own, strict=True):
        seed_diffs = [values[pid] - other_mean[pid] for pid in ids if values[pid] is not None]
        per_seed.append((label, math.fsum(seed_diffs) / len(seed_diffs) if seed_diffs else None))
    return PairedDifference(len(ids), math.fsum(diffs) / len(ids), low, high, tuple(per_seed), len(runs), len(other))


def _means(tables: list[dict[str, float | None]]) -> dict[str, float | None]:
    """Per problem, the mean of the runs' values that are not None; None when no run has one."""
    out = {}
    for pid in tables[0]:
        values = [t[pid] for t in tables if t[pid] is not None]
        out[pid] = math.fsum(values) / len(values) if values else None
    return out


def alarm_steps(run: dict[str, Any]) -> list[int] | None:
    """The logging steps of the run's `history` at which `hacking/reward_accuracy_alarm` turned on (0 -> 1, or 1 at
    its first logged step): where the divergence warning fired. [] when it never fired; None when no history entry
    has the key (the run predates it).

    >>> alarm_steps({"history": [{"step": 5, ALARM_KEY: 0.0}, {"step": 10, ALARM_KEY: 1.0}, {"step": 15, ALARM_KEY: 1.0}]})
    [10]
    >>> alarm_steps({"history": [{"step": 5, "reward": 0.5}]}) is None
    True
    """
    states = [(row.get("step"), row[ALARM_KEY]) for row in run.get("history") or [] if is_number(row.get(ALARM_KEY))]
    if not states:
        return None
    fired, before = [], 0.0
    for step, state in states:
        if state > 0 and before <= 0:
            fired.append(int(step) if is_number(step) else step)
        before = state
    return fired


def arm_labels(variants: Sequence[Variant]) -> list[str]:
    """One label per variant: the stem of its `config` parameter without the prefix every variant's stem shares up
    to its last "_"; the variant names when a variant has no `config`, or when two labels would coincide.

    >>> vs = [Variant(f"config={s}", {"config": f"c/arith_organism_{s}.yaml"}) for s in ("oracle", "oracle_shuffled")]
    >>> arm_labels(vs)
    ['oracle', 'oracle_shuffled']
    """
    configs = [v.parameters.get("config") for v in variants]
    if not variants or not all(isinstance(c, str) for c in configs):
        return [v.name for v in variants]
    stems = [Path(c).stem for c in configs]
    common = stems[0] if len(stems) == 1 else _common_prefix(stems)
    cut = common.rfind("_") + 1 if len(stems) > 1 else 0
    labels = [stem[cut:] for stem in stems]
    return labels if all(labels) and len(set(labels)) == len(labels) else [v.name for v in variants]


def _common_prefix(texts: list[str]) -> str:
    prefix = texts[0]
    for text in texts[1:]:
        while not text.startswith(prefix):
            prefix = prefix[:-1]
    return prefix


def parse_placebos(spec: str) -> tuple[str | None, dict[str, str]]:
    """`--placebo`: comma-separated entries `PLACEBO` (every arm's placebo unless named) or `ARM=PLACEBO`.

    Raises:
        ValueError: an empty ARM or PLACEBO, two bare entries, or an ARM named twice.

    >>> parse_placebos("oracle_shuffled, pum_mixed=pum_shuffled")
    ('oracle_shuffled', {'pum_mixed': 'pum_shuffled'})
    >>> parse_placebos("")
    (None, {})
    """
    default, named = None, {}
    for entry in (e.strip() for e in spec.split(",") if e.strip()):
        arm, equals, placebo = (s.strip() for s in entry.partition("="))
        if not equals:
            if default is not None:
                raise ValueError(
                    f"--placebo gives two placebos for every arm ({default}, {arm}): name the arms, ARM=PLACEBO"
                )
            default = arm
        elif not arm or not placebo or arm in named:
            raise ValueError(f"--placebo entry {entry!r}: write ARM=PLACEBO, each ARM once")
        else:
            named[arm] = placebo
    return default, named


@dataclass
class ArmRow:
    """One arm of `compare_arms`: its label, finished runs, per-seed summaries and comparisons."""

    label: str
    variant: Variant
    runs: list[dict[str, Any]]
    placebo: str | None = None
    vs_reference: PairedDifference | None = None
    vs_placebo: PairedDifference | None = None
    process_vs_reference: PairedDifference | None = None
    process_vs_placebo: PairedDifference | None = None
    after_vs_before: PairedDifference | None = None
    decision: str = MISSING
    seeds: list[Any] = field(default_factory=list)

    def values(self, read) -> list[float]:
        """`read(run)` of every run, finite numbers only."""
        return [v for run in self.runs if is_number(v := read(run))]


def decide(
    row: ArmRow,
    reference: str,
    placebo_arms: set[str],
    stable_arms: frozenset[str] = frozenset(),
    decide_on: str = "accuracy",
    margin: float = 0.0,
) -> str:
    """The decision column (module docstring); `decide_on` is "accuracy" or "process" (ProcessAcc); `margin` the
    smallest pooled difference against the reference that can be "supported" (0: the intervals alone)."""
    if row.label in stable_arms:
        if row.after_vs_before is None:
            return "undecided: no finished run" if not row.runs else "undecided: no after - before difference"
        alarms = [alarm_steps(run) for run in row.runs]
        if any(a is None for a in alarms):
            return "undecided: alarm not recorded"
        fired = any(alarms)
        return "stable" if row.after_vs_before.ci_low >= -STABILITY_MARGIN and not fired else "not stable"
    if row.label == reference:
        return "reference"
    if row.label in placebo_arms and row.placebo is None:
        return "placebo"
    if not row.runs:
        return "undecided: no finished run"
    if row.placebo is None:
        return "undecided: no placebo arm"
    pair = (
        (row.process_vs_reference, row.process_vs_placebo)
        if decide_on == "process"
        else (row.vs_reference, row.vs_placebo)
    )
    if None in pair:
        return "undecided: a comparison is missing"
    if not all(d.above_zero for d in pair):
        return "not supported"
    if pair[0].diff < margin:
        return f"not supported (within {margin:g} of the reference)"
    return "supported"


def compare_arms(
    variants: Sequence[Variant],
    reference: str,
    placebos: str = "",
    *,
    seed: int = 0,
    stable: str = "",
    decide_on: str = "accuracy",
    margin: float = 0.0,
) -> list[ArmRow]:
    """Every arm against `reference` and against its placebo (`parse_placebos`), pooled over finished seeds, and
    against itself before training; the arms named in `stable` (comma-separated) are judged by stability instead
    (module docstring). Decisions on greedy accuracy, or on ProcessAcc with `decide_on="process"`, with the
    pre-registered `margin` (a fraction, e.g. 0.03; 0 = the intervals alone). The reference's row first, then the
    others in `variants` order.

    Raises:
        ValueError: the reference or a named arm or placebo is no arm (the message lists the arms), the reference
            has no finished run, `decide_on` is not "accuracy" or "process", `margin` is outside [0, 1], or
            `pooled_difference`'s errors (runs that evaluated other problems).
    """
    if decide_on not in DECIDE_ON:
        raise ValueError(f"decide_on={decide_on!r}: use one of {', '.join(DECIDE_ON)}")
    if not (math.isfinite(margin) and 0.0 <= margin <= 1.0):
        raise ValueError(
            f"margin={margin!r}: use a fraction in [0, 1] (e.g. 0.03 for 3 points; 0 = the intervals alone)"
        )
    labels = arm_labels(variants)
    rows = [ArmRow(label, v, v.finished) for label, v in zip(labels, variants, strict=True)]
    by_label = {row.label: row for row in rows}
    by_name = {row.variant.name: row for row in rows}

    def find(name: str, what: str) -> ArmRow:
        row = by_label.get(name) or by_name.get(name)
        if row is None:
            raise ValueError(f"{what} {name!r} is no arm; the arms are {', '.join(labels)}")
        return row

    ref = find(reference, "--reference")
    if not ref.runs:
        raise ValueError(f"the reference arm {ref.label} has no finished run")
    default, named = parse_placebos(placebos)
    default = find(default, "--placebo").label if default else None
    named = {find(arm, "--placebo arm").label: find(p, "--placebo").label for arm, p in named.items()}
    if same := sorted(arm for arm, p in named.items() if arm == p):
        raise ValueError(f"--placebo: an arm cannot be its own placebo ({', '.join(same)})")
    placebo_arms = set(named.values()) | ({default} if default else set())
    stable_arms = frozenset(find(a.strip(), "--stable").label for a in stable.split(",") if a.strip())
    for row in rows:
        row.seeds = [row.variant.seed_of(run) for run in row.runs]
        if row.label in named:
            row.placebo = named[row.label]
        elif row is not ref and row.label not in placebo_arms:
            row.placebo = default
        if row.runs:
            row.after_vs_before = pooled_difference(row.runs, row.runs, seeds=row.seeds, seed=seed, other_when="before")
        if row.runs and row is not ref:
            row.vs_reference = pooled_difference(row.runs, ref.runs, seeds=row.seeds, seed=seed)
            row.process_vs_reference = pooled_difference(row.runs, ref.runs, PROCESS_ACC, seeds=row.seeds, seed=seed)
            placebo = by_label[row.placebo] if row.placebo else None
            if placebo is not None and placebo.runs:
                row.vs_placebo = pooled_difference(row.runs, placebo.runs, seeds=row.seeds, seed=seed)
                row.process_vs_placebo = pooled_difference(
                    row.runs, placebo.runs, PROCESS_ACC, seeds=row.seeds, seed=seed
                )
        row.decision = decide(row, ref.label, placebo_arms, stable_arms, decide_on, margin)
    return [ref, *(row for row in rows if row is not ref)]


def _after(run: dict[str, Any], key: str) -> Any:
    after = (run.get("result") or {}).get("after") or [{}]
    return after[0].get(key) if isinstance(after[0], dict) else None


def _process_acc(run: dict[str, Any]) -> Any:
    return (_after(run, "rewards") or {}).get(PROCESS_ACC)


def _mean_sd(values: list[float], n_runs: int, digits: int) -> str:
    mean, sd = mean_std(values)
    if mean is None:
        return MISSING
    text = f"{mean:.{digits}f}" + (f" ± {sd:.{digits}f}" if sd is not None else "")
    return text + (f" ({len(values)}/{n_runs} seeds)" if len(values) < n_runs else "")


def _difference(d: PairedDifference | None) -> str:
    if d is None:
        return MISSING
    return f"{d.diff:+.3f} [{d.ci_low:+.3f}, {d.ci_high:+.3f}] (n={d.n}, {d.seeds} vs {d.other_seeds} seeds)"


def _per_seed(d: PairedDifference | None) -> str:
    if d is None:
        return MISSING
    return "; ".join(f"s{s} {MISSING if v is None else f'{v:+.3f}'}" for s, v in d.per_seed)


def _alarm(row: ArmRow) -> str:
    fired, quiet, unknown = [], 0, []
    for seed, run in zip(row.seeds, row.runs, strict=True):
        steps = alarm_steps(run)
        if steps is None:
            unknown.append(f"s{seed}")
        elif steps:
            fired.append(f"s{seed} at step {', '.join(map(str, steps))}")
        else:
            quiet += 1
    recorded = len(fired) + quiet
    parts = [f"fired in {len(fired)}/{recorded}" + (f": {'; '.join(fired)}" if fired else "")] if recorded else []
    return "; ".join(parts + ([f"not recorded: {', '.join(unknown)}"] if unknown else [])) or MISSING


def format_arm_comparison(
    rows: Sequence[ArmRow], reference: str, decide_on: str = "accuracy", margin: float = 0.0
) -> str:
    """The markdown section of `compare_arms`' rows (decided on `decide_on`, with `margin`): the rule, then one row
    per arm."""
    ref = next((r.label for r in rows if r.decision == "reference"), reference)
    metric = "ProcessAcc" if decide_on == "process" else "greedy accuracy"
    lines = [
        f"## Paired comparison against `{ref}` and the placebos",
        "",
        f"Decision rule: an arm is **supported** only when its pooled paired difference in {metric} against "
        f"the reference arm `{ref}` AND against its placebo arm both have 95% intervals entirely above 0"
        + (f" and its difference against `{ref}` is at least {margin:g} (the pre-registered margin)" if margin else "")
        + "; otherwise "
        "not supported, or undecided when a comparison is missing. Pooled: per evaluation problem, the arm's mean "
        "correctness over its finished seeds minus the other arm's over its finished seeds, averaged over problems, "
        "with a percentile-bootstrap 95% interval over problems (1000 resamples). The interval holds the problems "
        "fixed and does not cover the spread over seeds: the per-seed columns give each seed's difference against "
        "the other arm's pooled values. Accuracy, ProcessAcc (the step oracle's, `oracle_process_reward`) and length "
        "(greedy, tokens) are the first evaluation set's after training, mean ± sample sd over finished seeds. Alarm: "
        "the reward-accuracy divergence warning (`hacking/reward_accuracy_alarm`), the step(s) where it fired. "
        f"An arm judged by stability is **stable** when its own after − before interval does not lie below "
        f"−{STABILITY_MARGIN:g} and the alarm fired in none of its runs.",
        "",
    ]
    header = [
        "arm", "seeds", "accuracy", "ProcessAcc", "length", "wall time (s)", "Δacc after − before (pooled [95%])",
        f"Δacc vs {ref} (pooled [95%])", "per seed", "placebo", "Δacc vs placebo (pooled [95%])", "per seed",
        f"ΔProcessAcc vs {ref} (pooled [95%])", "ΔProcessAcc vs placebo (pooled [95%])", "alarm", "decision",
    ]  # fmt: skip
    table = []
    for row in rows:
        n = len(row.runs)
        table.append(
            [
                row.label,
                f"{n} ({', '.join(f's{s}' for s in row.seeds)})" if n else "0",
                _mean_sd(row.values(lambda r: _after(r, "accuracy")), n, 3),
                _mean_sd(row.values(_process_acc), n, 3),
                _mean_sd(row.values(lambda r: _after(r, "mean_length")), n, 1),
                _mean_sd(row.values(lambda r: r.get("wall_time_s")), n, 0),
                _difference(row.after_vs_before),
                _difference(row.vs_reference),
                _per_seed(row.vs_reference),
                row.placebo or MISSING,
                _difference(row.vs_placebo),
                _per_seed(row.vs_placebo),
                _difference(row.process_vs_reference),
                _difference(row.process_vs_placebo),
                _alarm(row),
                f"**{row.decision}**" if row.decision == "supported" else row.decision,
            ]
        )
    lines.append(markdown_table(header, table, align=["left", "left"] + ["right"] * 4 + ["left"] * 10))
    return "\n".join(lines) + "\n"
