"""procrl: RL post-training of language models with process rewards, on TRL.

The repository's root folders `rewards/`, `trainers/` and `data_builders/` are the packages
`procrl.rewards`, `procrl.trainers` and `procrl.data_builders` (see pyproject.toml, DESIGN §1).
"""

__version__ = "0.1.0"
