"""GRPO with process rewards (outcome + PiCSAR bonus by default) on math word problems.

    accelerate launch train_grpo.py --config configs/grpo/svamp_smollm2_picsar.yaml
    python train_grpo.py --config configs/grpo/svamp_smollm2_picsar.yaml --max_steps 5
    ACCELERATE_USE_CPU=True torchrun --nproc_per_node 2 train_grpo.py --config configs/grpo/svamp_smollm2_picsar.yaml

The code lives in `procrl.train_grpo` (so `procrl demo` and the tests reuse it); this file is the launcher.
"""

from procrl.train_grpo import GRPOScriptArguments, main, make_parser  # noqa: F401

if __name__ == "__main__":
    from procrl.cli import print_summary

    parser = make_parser()
    script_args, training_args, model_args = parser.parse_args_and_config()
    summary = main(script_args, training_args, model_args)
    if training_args.process_index == 0:
        print_summary(summary)
