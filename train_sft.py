"""SFT warm start on gold traces: `accelerate launch train_sft.py --config configs/sft/gsm8k_smollm2.yaml` (see procrl/scripts/sft.py)."""

from procrl.scripts.sft import main

if __name__ == "__main__":
    raise SystemExit(main())
