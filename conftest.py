"""Doctest collection of the library folders (pyproject: `--doctest-modules`, `testpaths`).

The folders are packages of the `procrl` namespace (pyproject `[tool.setuptools] package-dir`): `rewards/qa.py`
is `procrl.rewards.qa`. pytest would import it by path as a top-level `rewards.qa`, a second copy of the
module beside the installed one. Here every doctest module of a library folder imports its installed name instead,
and files outside the library folders (tests/, benchmarks/, train_*.py) are never collected as doctests.
"""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import pytest
from _pytest.doctest import DoctestModule

ROOT = Path(__file__).resolve().parent
_PACKAGE_DIR = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-dir"]
# Only the top folders: procrl.rewards.stepgap is rewards/stepgap, found below rewards/.
LIBRARY_FOLDERS = {ROOT / folder: package for package, folder in _PACKAGE_DIR.items() if "/" not in folder}
# Modules (and packages, with all their modules) whose doctests an existing test already runs
# (tests/rewards/test_outcome.py::test_docstring_examples, under that file's generous time budget).
RUN_ELSEWHERE = {"procrl.rewards.outcome"}


def run_elsewhere(name: str) -> bool:
    """Whether `name` is in RUN_ELSEWHERE or a module of a package that is: procrl.rewards.outcome.extract."""
    return any(name == skip or name.startswith(f"{skip}.") for skip in RUN_ELSEWHERE)


def library_module_name(path: Path) -> str | None:
    """`procrl.rewards.stepgap.trace` for rewards/stepgap/trace.py (or the folder rewards/stepgap/); None outside
    the library folders."""
    path = path.resolve()
    for folder, package in LIBRARY_FOLDERS.items():
        if path.is_relative_to(folder):
            parts = list(path.relative_to(folder).parts)
            if parts:
                parts[-1] = parts[-1].removesuffix(".py")
                if parts[-1] == "__init__":
                    parts.pop()
            return ".".join([package, *parts])
    return None


class LibraryDoctestModule(DoctestModule):
    """The doctests of one library module, imported under its installed `procrl.*` name."""

    def _getobj(self):
        return importlib.import_module(library_module_name(self.path))


@pytest.hookimpl(tryfirst=True)
def pytest_collect_directory(path: Path, parent):
    """A library folder is a plain directory to pytest: its `Package` collector would import `__init__.py` by path,
    as a top-level `rewards` module."""
    if library_module_name(path) is not None:
        return pytest.Dir.from_parent(parent, path=path)
    return None


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path: Path, parent):
    collected = yield
    name = library_module_name(file_path)
    kept = []
    for node in collected:
        if type(node) is not DoctestModule:
            kept.append(node)
        elif name is not None and not run_elsewhere(name):
            kept.append(LibraryDoctestModule.from_parent(parent, path=file_path))
    return kept
