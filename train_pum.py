"""Train a Prefix Utility Model: `accelerate launch train_pum.py [--config configs/pum/train_gsm8k_smollm2.yaml] [flags]`."""

from procrl.scripts.train_pum import main

if __name__ == "__main__":
    raise SystemExit(main())
