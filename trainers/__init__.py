"""procrl.trainers: GRPO with process rewards on TRL (layer 3, above rewards and data builders).

`ProcessGRPOTrainer` overrides two private methods of TRL's `GRPOTrainer` and uses its experimental `rollout_func`
(`procrl.trainers.grpo`), so the package is tied to one TRL minor version, the one pyproject.toml pins
(`trl==1.16.*`). Importing it with another installed TRL fails here, with the fix, instead of misbehaving later.
"""

from importlib.metadata import PackageNotFoundError, version

PINNED_TRL = "1.16"  # pyproject.toml: "trl==1.16.*"


def check_trl_version(installed: str | None) -> None:
    """Raise `ImportError` unless `installed` (a TRL version string, None = not installed) is a `PINNED_TRL`.* release.

    >>> check_trl_version("1.16.0")
    >>> check_trl_version("1.17.0")
    Traceback (most recent call last):
    ...
    ImportError: procrl.trainers needs TRL 1.16.* (pinned in pyproject.toml), but TRL 1.17.0 is installed. ...
    """
    if installed is not None and installed.split("+")[0].split(".")[:2] == PINNED_TRL.split("."):
        return
    found = "TRL is not installed" if installed is None else f"TRL {installed} is installed"
    raise ImportError(
        f"procrl.trainers needs TRL {PINNED_TRL}.* (pinned in pyproject.toml), but {found}. ProcessGRPOTrainer "
        f'overrides private TRL methods that change between minor versions. Fix: pip install "trl=={PINNED_TRL}.*"'
    )


def _installed_trl() -> str | None:
    try:
        return version("trl")
    except PackageNotFoundError:
        return None


check_trl_version(_installed_trl())
