"""procrl: RL post-training of language models with process rewards, on TRL.

The repository's root folders `rewards/`, `trainers/` and `data_builders/` are the packages
`procrl.rewards`, `procrl.trainers` and `procrl.data_builders` (see pyproject.toml, docs/architecture.md "Layers"). The packages are
layers, lowest first: core (`procrl/` outside `procrl/scripts/`) < `procrl.rewards` < `procrl.data_builders` <
`procrl.trainers` < the commands (`procrl/scripts/`, `procrl/cli.py`, the root launchers); a module imports only from
its own layer or a lower one (`tests/test_layers.py`).
"""

__version__ = "0.1.0"
