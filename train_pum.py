"""Train a Prefix Utility Model (PUM) on PUM-Math pairs with TRL's RewardTrainer (Bradley-Terry with margin).

    accelerate launch train_pum.py --config configs/pum/train_gsm8k_smollm2.yaml
    python train_pum.py --config configs/pum/train_gsm8k_smollm2.yaml --max_steps 20
    ACCELERATE_USE_CPU=True torchrun --nproc_per_node 2 train_pum.py --config configs/pum/train_gsm8k_smollm2.yaml
    python train_pum.py --config configs/pum/train_gsm8k_smollm2_lora.yaml

The code lives in `procrl.trainers.pum_training` (so the CLI and the tests reuse it); this file is the launcher.
"""

from procrl.trainers.pum_training import PUMScriptArguments, main, make_parser  # noqa: F401

if __name__ == "__main__":
    raise SystemExit(main())
