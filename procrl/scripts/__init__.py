"""procrl's entry points (the top layer): one module per command, each `main(argv=None) -> int` + `make_parser()`.

The `procrl` command (`procrl/cli.py`) dispatches its subcommands here; `train_grpo.py` and `train_pum.py` at the
repository root are five-line launchers of the same functions. Library code below this package never prints and
never parses a command line.
"""
