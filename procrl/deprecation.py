"""Old import paths that keep working for one release (core layer).

A module whose public names moved (to the same or a lower layer) ends with

    __getattr__ = moved_names(__name__, {"old_name": "procrl.new.module", ...})

and `from old.module import old_name` then returns the object from its new home with a `DeprecationWarning` that
names the new path. Nothing is imported upward: the new module is always in the same or a lower layer, so the
import contract (`tests/test_layers.py`) holds for the shims too.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any

REMOVED_IN = "procrl 0.3"


def moved_names(old_module: str, moves: Mapping[str, str]) -> Callable[[str], Any]:
    """A module-level `__getattr__` (PEP 562) that resolves each moved name from its new module, with a warning.

    Args:
        old_module: the module that used to define the names (`__name__` of the shim).
        moves: old attribute name -> dotted module that now defines it under the same name, or
            `"module:new_name"` when it was renamed too.

    Raises:
        AttributeError: (from the returned function) for a name that is neither moved nor defined.

    >>> getattr_ = moved_names("procrl.old", {"get_logger": "procrl.utils"})
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     getattr_("get_logger").__name__, str(caught[0].message)
    ('get_logger', 'procrl.old.get_logger moved to procrl.utils.get_logger; the old path is removed in procrl 0.3')
    """

    def __getattr__(name: str) -> Any:
        if name not in moves:
            raise AttributeError(f"module {old_module!r} has no attribute {name!r}")
        new_module, _, new_name = moves[name].partition(":")
        new_name = new_name or name
        warnings.warn(
            f"{old_module}.{name} moved to {new_module}.{new_name}; the old path is removed in {REMOVED_IN}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(new_module), new_name)

    return __getattr__
