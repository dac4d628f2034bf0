"""GRPO with process rewards: `accelerate launch train_grpo.py --config configs/grpo/svamp_smollm2_picsar.yaml` (see procrl/scripts/train_grpo.py)."""

from procrl.scripts.train_grpo import main

if __name__ == "__main__":
    raise SystemExit(main())
