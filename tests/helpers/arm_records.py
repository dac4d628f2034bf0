"""A train_grpo.py run record (run.json + `path`) of one GRPO arm and seed, with the per-problem evaluation that
procrl.evals.arm_comparison reads (importable: pyproject adds tests/helpers to pytest's pythonpath)."""

from __future__ import annotations

from procrl.evals.arm_comparison import ALARM_KEY, PROCESS_ACC

SET = "arith-ops4-d1-test-n400[0:4]"
IDS = ["p0", "p1", "p2", "p3"]


def grpo_run(arm: str, seed: int, correct: list, process: list | None = None, *, status="finished", ids=IDS, name=SET,
        alarm: list | None = None, wall: float = 100.0, length: float = 30.0, before: list | None = None) -> dict:  # fmt: skip
    """A train_grpo.py run.json of arm `arm` (config configs/grpo/arith_organism_<arm>.yaml) in a sweep; `before`:
    the per-problem correctness of the evaluation before training (default: all 0)."""
    process = process if process is not None else [None] * len(ids)
    problems = [
        {"problem_id": pid, "correct": c, "rewards": {"outcome_reward": c, PROCESS_ACC: p}}
        for pid, c, p in zip(ids, correct, process, strict=True)
    ]
    scored = [c for c in correct if c is not None]
    given = [p for p in process if p is not None]
    after = {
        "name": name, "n": len(ids), "accuracy": sum(scored) / len(ids), "mean_length": length,
        "rewards": {PROCESS_ACC: sum(given) / len(given) if given else None}, "problems": problems,
    }  # fmt: skip
    before_problems = [
        {"problem_id": pid, "correct": c, "rewards": {}} for pid, c in zip(ids, before or [0] * len(ids), strict=True)
    ]
    history = [{"step": 5 * (i + 1), "reward": 0.5, ALARM_KEY: a} for i, a in enumerate(alarm or [])]
    parameters = {"config": f"configs/grpo/arith_organism_{arm}.yaml", "seed": seed}
    return {
        "schema_version": 1, "status": status, "wall_time_s": wall, "path": f"sweep/{arm},seed={seed}",
        "variant": {"sweep": "s", "name": f"config=arith_organism_{arm},seed={seed}", "parameters": parameters,
                    "seed": seed},
        "metrics": {}, "history": history, "result": {"after": [after], "before": [{"name": name, "problems": before_problems}]},
    }  # fmt: skip
