"""Thin override configs (`base:`, procrl.scripts._common.load_config): the merge rules, the errors, the parse path
(`parse_or_exit`, `ConfigParser`, `--config=x.yaml`), and that every converted config resolves EXACTLY to the full
copy it replaced (read from the commit before the conversion)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field, fields
from pathlib import Path

import pytest
import yaml

from procrl.scripts import build_pum_data, train_grpo, train_pum
from procrl.scripts._common import ConfigParser, load_config, parse_or_exit, resolved_config_args

ROOT = Path(__file__).resolve().parent.parent
BEFORE = "6b9a7b3f64fdbdab3769352a808d32fe3f04eca9"  # the last commit with the full copies


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_override_keys_replace_the_base_top_level_and_chains_resolve(tmp_path):
    (tmp_path / "sub").mkdir()
    _write(tmp_path / "root.yaml", "a: 1\nlist: [1, 2]\nenv: {X: '1', Y: '2'}\nkeep: k\n")
    _write(tmp_path / "sub" / "mid.yaml", "base: ../root.yaml\na: 2\nlist: [3]\n")  # relative to this file's folder
    leaf = _write(tmp_path / "leaf.yaml", "base: sub/mid.yaml\nenv: {X: '3'}\nnew: n\n")
    # lists and mappings are replaced whole, not merged item by item; the base's other keys stay
    assert load_config(leaf) == {"a": 2, "list": [3], "env": {"X": "3"}, "keep": "k", "new": "n"}
    absolute = _write(tmp_path / "abs.yaml", f"base: {tmp_path / 'root.yaml'}\nkeep: other\n")
    assert load_config(absolute)["keep"] == "other"


def test_override_errors_say_what_to_fix(tmp_path):
    _write(tmp_path / "a.yaml", "base: b.yaml\nx: 1\n")
    _write(tmp_path / "b.yaml", "base: a.yaml\ny: 2\n")
    with pytest.raises(ValueError, match=r"config base cycle: .*a.yaml -> .*b.yaml -> .*a.yaml"):
        load_config(tmp_path / "a.yaml")
    missing = _write(tmp_path / "m.yaml", "base: gone.yaml\n")
    with pytest.raises(FileNotFoundError, match=r"m.yaml: base: .*gone.yaml cannot be read"):
        load_config(missing)
    with pytest.raises(ValueError, match="base: must be the path of a YAML file"):
        load_config(_write(tmp_path / "n.yaml", "base: [x]\n"))
    _write(tmp_path / "list.yaml", "- 1\n")
    with pytest.raises(ValueError, match="list.yaml must contain a YAML mapping"):
        load_config(_write(tmp_path / "l.yaml", "base: list.yaml\n"))


@dataclass
class _Args:
    a: int = field(default=0, metadata={"help": "a"})
    b: str = field(default="d", metadata={"help": "b"})
    c: list[int] = field(default_factory=lambda: [0], metadata={"help": "c"})


def test_flags_override_the_resolved_config_in_every_parse_path(tmp_path, capsys):
    _write(tmp_path / "base.yaml", "a: 1\nb: base\nc: [1, 2]\n")
    override = _write(tmp_path / "o.yaml", "base: base.yaml\nb: over\n")
    parser = ConfigParser((_Args,))
    assert parser.parse_args_and_config(["--config", str(override), "--a", "5"]) == (_Args(5, "over", [1, 2]),)
    from trl import TrlParser

    (args,) = parse_or_exit(TrlParser((_Args,)), [f"--config={override}", "--c", "7"])  # wandb agent's form
    assert args == _Args(1, "over", [7])
    unknown = _write(tmp_path / "u.yaml", "base: base.yaml\nzzz: 1\n")  # TRL's unknown-key check still applies
    assert parse_or_exit(TrlParser((_Args,), prog="p"), ["--config", str(unknown)]) is None
    assert "p: error: Unknown arguments from config file: ['--zzz', '1']" in capsys.readouterr().err


def test_a_config_without_base_reaches_trl_unchanged(tmp_path):
    plain = _write(tmp_path / "p.yaml", "a: 1\n")
    with resolved_config_args(["--config", str(plain), "--a", "2"]) as args:
        assert args == ["--config", str(plain), "--a", "2"]
    with resolved_config_args(["--a", "2"]) as args:
        assert args == ["--a", "2"]
    with resolved_config_args(["--config", str(_write(tmp_path / "o.yaml", "base: p.yaml\n"))]) as args:
        merged = Path(args[1])
        assert yaml.safe_load(merged.read_text()) == {"a": 1}
    assert not merged.exists()  # the temporary file is gone after the parse


# --------------------------------------------------------------------------------------------------------------------
# The converted configs: each resolves to the full copy it replaced
# --------------------------------------------------------------------------------------------------------------------

CONVERTED = {
    "configs/grpo/stepgap_2wiki_smollm2_no_shaping.yaml": train_grpo.make_parser,
    "configs/grpo/stepgap_2wiki_smollm2_zero_cc.yaml": train_grpo.make_parser,
    "configs/grpo/svamp_smollm2_pum.yaml": train_grpo.make_parser,
    "configs/grpo/svamp_smollm2_pum_process.yaml": train_grpo.make_parser,
    "configs/grpo/svamp_smollm2_pum_steps.yaml": train_grpo.make_parser,
    "configs/pum/train_gsm8k_smollm2_cpu.yaml": train_pum.make_parser,
    "configs/pum/train_svamp_smollm2_cpu.yaml": train_pum.make_parser,
    "configs/pum/train_gsm8k_smollm2_lora.yaml": train_pum.make_parser,
    "configs/pum/build_gsm8k_cpu.yaml": build_pum_data.make_parser,
    "configs/pum/build_svamp_cpu.yaml": build_pum_data.make_parser,
}
# The SVAMP PUM family now inherits the demo config's `answer_extraction: strict`, which its full copies left at the
# default (strict: the parsed comparison below checks that it is the default).
GAINED = {"answer_extraction": "strict"}
GAINED_BY = {"svamp_smollm2_pum", "svamp_smollm2_pum_process", "svamp_smollm2_pum_steps"}
# Issue 26: the step scorer has its own key. Before, "pum" in reward_funcs became the step scorer in mixed mode and its
# reward_weights entry was dropped at parse time; now reward_funcs are the scalar rewards alone, one weight each.
# Keys renamed in every config (the builder's `engine` is the `generation_backend` of every command).
KEY_RENAMES = {"engine": "generation_backend"}
RENAMED = {
    "svamp_smollm2_pum_steps": {"reward_funcs": ["outcome"], "reward_weights": [1.0], "step_reward_func": "pum"},
}


def _expected(path: str) -> dict:
    """The old full copy of `path` with the keys it gained or had renamed since (GAINED, KEY_RENAMES, RENAMED)."""
    stem = Path(path).stem
    old = {KEY_RENAMES.get(key, key): value for key, value in yaml.safe_load(_old_text(path)).items()}
    return {**old, **(GAINED if stem in GAINED_BY else {}), **RENAMED.get(stem, {})}


def _old_text(path: str) -> str:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs the git history (the full copies before the conversion)")
    done = subprocess.run(["git", "show", f"{BEFORE}:{path}"], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"commit {BEFORE} is not in this clone: {done.stderr.strip()}")
    return done.stdout


@pytest.mark.parametrize("path", CONVERTED, ids=lambda p: Path(p).stem)
def test_a_converted_config_is_a_thin_override_that_resolves_to_the_old_copy(path):
    text = (ROOT / path).read_text()
    assert "base" in yaml.safe_load(text)
    expected = _expected(path)
    assert load_config(ROOT / path) == expected
    assert len(yaml.safe_load(text)) < len(expected) // 2  # thin: fewer than half the keys


@pytest.mark.parametrize("path", CONVERTED, ids=lambda p: Path(p).stem)
def test_a_converted_config_parses_to_the_same_settings(path, tmp_path):
    old = _write(tmp_path / "old.yaml", yaml.safe_dump(_expected(path)))
    flags = ["--output_dir", str(tmp_path / "out")]  # parsing creates nothing in the repository
    new_args = parse_or_exit(CONVERTED[path](), ["--config", str(ROOT / path), *flags])
    old_args = parse_or_exit(CONVERTED[path](), ["--config", str(old), *flags])
    assert new_args is not None and old_args is not None
    for new, before in zip(new_args, old_args, strict=True):
        assert {f.name: getattr(new, f.name) for f in fields(new)} == {f.name: getattr(before, f.name) for f in fields(before)}  # fmt: skip
