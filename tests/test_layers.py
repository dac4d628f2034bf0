"""The import contract of the package layout (docs/architecture.md "Layers"), checked on the source with `ast`.

Layers, lowest first (docs/architecture.md "Layers"): core (`procrl/` outside `procrl/scripts/`, run records,
provenance and sweeps in `procrl/experiment/` included) < `procrl.rewards` < `procrl.data_builders` < `procrl.evals`
(reports too) < `procrl.trainers` < scripts (`procrl/scripts/`, `procrl/cli.py` and the root launchers). A module imports only from
its own layer or a lower one, at module top; imports inside functions count too (they would hide an upward
dependency), and remain only for an optional heavy dependency, marked by a comment. Entry points (`def main`,
`make_parser`, argparse, `if __name__ == "__main__"`) live in the scripts layer only, and library code logs instead
of printing. No project code is imported or run here.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {
    "procrl": "procrl",
    "rewards": "procrl.rewards",
    "data_builders": "procrl.data_builders",
    "evals": "procrl.evals",
    "trainers": "procrl.trainers",
}
RANK = {"core": 0, "rewards": 1, "data_builders": 2, "evals": 3, "trainers": 4, "scripts": 5}
# optional dependencies that only some commands need and that are slow or absent: the only function-local imports
OPTIONAL_HEAVY = {"vllm", "deepspeed", "matplotlib", "wandb", "llguidance", "lmformatenforcer", "xgrammar"}
MAX_CODE_LINES = 400  # code lines: not blank, not a comment, not a docstring (issue 26: split by concept, not by prose)


def library_files() -> list[Path]:
    files = []
    for folder in FOLDERS:
        files += [p for p in sorted((ROOT / folder).rglob("*.py")) if "scripts" not in p.relative_to(ROOT).parts]
    return [p for p in files if p.relative_to(ROOT).as_posix() not in ("procrl/cli.py", "procrl/__main__.py")]


def layer_of_module(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "procrl":
        return None
    if len(parts) > 1 and parts[1] in ("rewards", "data_builders", "evals", "trainers"):
        return parts[1]
    if len(parts) > 1 and parts[1] in ("scripts", "cli", "__main__"):
        return "scripts"
    return "core"


def module_of_file(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("").parts
    parts = [*FOLDERS[rel[0]].split("."), *rel[1:]]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """Absolute module names an import statement refers to (relative imports resolved)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = module.split(".") if is_package else module.split(".")[:-1]
    if node.level:
        base = base[: len(base) - (node.level - 1)]
        prefix = ".".join(base)
        target = f"{prefix}.{node.module}" if node.module else prefix
    else:
        target = node.module or ""
    # `from procrl import rewards` imports the subpackage procrl.rewards
    return [target] + [f"{target}.{alias.name}" for alias in node.names if target == "procrl"]


def code_lines(tree: ast.Module, lines: list[str]) -> int:
    """Lines that hold code: not blank, not only a comment, not inside a module, class or function docstring."""
    prose: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                prose.update(range(first.lineno, first.end_lineno + 1))
    return sum(
        1 for n, line in enumerate(lines, 1) if n not in prose and line.strip() and not line.strip().startswith("#")
    )


def function_import_ids(tree: ast.AST) -> set[int]:
    ids = set()
    for func in ast.walk(tree):
        if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            ids.update(id(n) for n in ast.walk(func) if isinstance(n, ast.Import | ast.ImportFrom))
    return ids


def scan() -> dict[str, list[str]]:
    """Every violation, by kind: upward, local, entry, print, long."""
    found: dict[str, list[str]] = {"upward": [], "local": [], "entry": [], "print": [], "long": []}
    for path in library_files():
        rel = path.relative_to(ROOT).as_posix()
        source = path.read_text()
        lines = source.splitlines()
        tree = ast.parse(source)
        module = module_of_file(path)
        own = RANK[layer_of_module(module)]
        local = function_import_ids(tree)
        if (n_code := code_lines(tree, lines)) > MAX_CODE_LINES:
            found["long"].append(f"{rel}: {n_code} code lines")
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                targets = imported_modules(node, module, path.name == "__init__.py")
                for target in targets:
                    layer = layer_of_module(target)
                    if layer is not None and RANK[layer] > own:
                        found["upward"].append(f"{rel}:{node.lineno} ({layer_of_module(module)}) imports {target}")
                if id(node) in local:
                    top = targets[0].split(".")[0]
                    comment = "#" in lines[node.lineno - 1] or lines[node.lineno - 2].strip().startswith("#")
                    if top not in OPTIONAL_HEAVY or not comment:
                        found["local"].append(f"{rel}:{node.lineno} imports {targets[0]} inside a function")
                if any(t.split(".")[0] == "argparse" for t in targets):
                    found["entry"].append(f"{rel}:{node.lineno} imports argparse")
            elif isinstance(node, ast.FunctionDef) and node.name in ("main", "make_parser") and node in tree.body:
                found["entry"].append(f"{rel}:{node.lineno} def {node.name}")
            elif (
                isinstance(node, ast.If)
                and "__name__" in ast.unparse(node.test)
                and "__main__" in ast.unparse(node.test)
            ):
                found["entry"].append(f"{rel}:{node.lineno} __main__ block")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                found["print"].append(f"{rel}:{node.lineno} print()")
    return found


@pytest.fixture(scope="module")
def violations() -> dict[str, list[str]]:
    return scan()


def test_no_import_goes_up_a_layer(violations):
    assert violations["upward"] == [], "\n".join(violations["upward"])


def test_imports_sit_at_module_top_except_optional_heavy_ones(violations):
    assert violations["local"] == [], "\n".join(violations["local"])


def test_entry_points_live_in_procrl_scripts(violations):
    assert violations["entry"] == [], "\n".join(violations["entry"])


def test_library_code_logs_instead_of_printing(violations):
    assert violations["print"] == [], "\n".join(violations["print"])


def test_no_module_is_over_the_size_limit(violations):
    assert violations["long"] == [], "\n".join(violations["long"])


def test_the_scan_sees_each_kind_of_violation(tmp_path, monkeypatch):
    """The checker itself: a tree with one violation of each kind is reported exactly so."""
    for folder in FOLDERS:
        (tmp_path / folder).mkdir()
    (tmp_path / "procrl" / "bad.py").write_text(
        "from procrl.trainers import grpo\n"
        "def f():\n    import torch\n    print('x')\n"
        "def g():\n    # optional: only the vLLM engine needs it\n    import vllm\n"
        "def main():\n    pass\n"
        "if __name__ == '__main__':\n    main()\n" + "# a comment\n\n" * MAX_CODE_LINES
    )
    long_docstring = 'def f():\n    """Doc.\n' + "    prose\n" * MAX_CODE_LINES + '    """\n    return 1\n'
    (tmp_path / "procrl" / "prose.py").write_text(long_docstring * 2)  # 4 code lines, 2 * (MAX_CODE_LINES + 2) prose
    (tmp_path / "procrl" / "big.py").write_text('"""Doc.\n\nmore doc\n"""\n\n' + "x = 1\n" * (MAX_CODE_LINES + 1))
    (tmp_path / "procrl" / "experiment").mkdir()
    (tmp_path / "procrl" / "experiment" / "rec.py").write_text(
        "from procrl.evals import stats\nfrom procrl.trainers import grpo\n"
    )
    (tmp_path / "rewards" / "ok.py").write_text(
        "from procrl import utils\nfrom . import other\nfrom procrl.evals import stats\n"
    )
    (tmp_path / "trainers" / "up.py").write_text(
        "from ..rewards import ok\ndef h():\n    from procrl.scripts import x  # no\n"
    )
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    found = scan()
    assert found["upward"] == [
        "procrl/bad.py:1 (core) imports procrl.trainers",
        "procrl/experiment/rec.py:1 (core) imports procrl.evals",
        "procrl/experiment/rec.py:2 (core) imports procrl.trainers",
        "rewards/ok.py:3 (rewards) imports procrl.evals",
        "trainers/up.py:3 (trainers) imports procrl.scripts",
    ]
    assert found["local"] == [
        "procrl/bad.py:3 imports torch inside a function",
        "trainers/up.py:3 imports procrl.scripts inside a function",
    ]
    assert found["entry"] == ["procrl/bad.py:8 def main", "procrl/bad.py:10 __main__ block"]
    assert found["print"] == ["procrl/bad.py:4 print()"]
    assert found["long"] == [f"procrl/big.py: {MAX_CODE_LINES + 1} code lines"]


def test_every_package_folder_is_listed_in_pyproject():
    """A wheel (non-editable install) ships only the packages pyproject lists: a new package folder must be there."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {module_of_file(init) for folder in FOLDERS for init in (ROOT / folder).rglob("__init__.py")}
    assert found - listed == set(), f"add to [tool.setuptools] packages in pyproject.toml: {sorted(found - listed)}"


# What `procrl demo` imports: the command, both stages' settings, the math task and the GRPO config's rewards and step
# scorer, as the job resolves them (`TASKS`, `REWARDS`: import paths). A ratchet: issue 26 brought the GRPO-only demo
# from 57 modules to its goal of 45; issue 27's two-stage demo adds what it runs (SFT and its cache, the scratch
# organism, the arith tasks and tokenizer, the step oracle, the placebo wrappers): 61; issue 29's SFT on search
# episodes adds `trainers.sft_episodes` (its JSONL reader is procrl.utils', so the retrieval package stays out): 62.
DEMO_MODULE_BUDGET = 62
DEMO_MUST_NOT_LOAD = (
    "procrl.judges.server", "procrl.judges.client", "procrl.judges.local", "procrl.evals.selection",
    "procrl.evals.bestofn", "procrl.evals.frs.compute", "procrl.experiment.sweeps", "procrl.rewards.pum",
    "procrl.trainers.frs_callback", "procrl.trainers.tasks.search", "procrl.rewards.stepgap",
    "procrl.generation.engines", "procrl.generation.transformers_engine",
)  # fmt: skip
DEMO_IMPORTS = """
import json, pkgutil, sys
from procrl.scripts import train_grpo
from procrl.trainers.tasks.arguments import TASKS
from procrl.trainers.tasks.job import GRPOJob
from procrl.trainers.tasks.rewards import REWARDS
from procrl.scripts import demo, sft
sft.make_parser().parse_args_and_config(["--config", str(demo.find_config(demo.SFT_CONFIG))])
job = GRPOJob(*train_grpo.make_parser().parse_args_and_config(["--config", str(demo.find_config(demo.GRPO_CONFIG))]))
pkgutil.resolve_name(TASKS[job.script.task])
for name in job.script.reward_funcs:
    pkgutil.resolve_name(REWARDS[name].scalar.target)
pkgutil.resolve_name(REWARDS[job.script.step_reward_func].step.target)
print(json.dumps(sorted(m for m in sys.modules if m == "procrl" or m.startswith("procrl."))))
"""


@pytest.mark.slow
def test_the_demo_loads_only_what_it_runs():
    done = subprocess.run(
        [sys.executable, "-c", DEMO_IMPORTS], cwd=ROOT, capture_output=True, text=True, timeout=600, check=True
    )
    modules = json.loads(done.stdout.strip().splitlines()[-1])
    assert not [m for m in modules if m.startswith(DEMO_MUST_NOT_LOAD)], modules
    assert len(modules) <= DEMO_MODULE_BUDGET, f"{len(modules)} procrl modules: {modules}"
