"""A stand-in program for sweep tests: writes a run.json (the run-record contract's `status`) like a real command.

    python fake_sweep_program.py --step=2 --counter=/tmp/c.txt --output_dir DIR

Appends "<step> <pid>" to the counter file, writes `DIR/run.json` with status "running" (and its pid and the
PROCRL_VARIANT it was given; with FAKE_DIE_EARLY_AT=<step> it exits 4 before writing any), then: with FAKE_BLOCK_AT=<step> waits for `DIR/release` (a file the tests never
create: the test kills or stops it); with FAKE_FAIL_AT=<step> records status "failed" and exits 3; else records
"finished" and exits 0.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path


def write_record(folder: Path, **record) -> None:
    tmp = folder / ".run.json.tmp"
    tmp.write_text(json.dumps({"schema_version": 1, **record}))
    os.replace(tmp, folder / "run.json")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--step", type=int, required=True)
    parser.add_argument("--counter", required=True)
    parser.add_argument("--output_dir", required=True)
    args, rest = parser.parse_known_args()
    folder = Path(args.output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    with open(args.counter, "a") as counter:
        counter.write(f"{args.step} {os.getpid()}\n")
    if os.environ.get("FAKE_DIE_EARLY_AT") == str(args.step):
        return 4  # dies before its run record exists (an import error, a bad flag)
    variant = json.loads(os.environ.get("PROCRL_VARIANT", "null"))
    record = {"argv": sys.argv[1:], "pid": os.getpid(), "variant": variant, "rest": rest}
    write_record(folder, status="running", **record)
    print(f"fake program step {args.step} running")
    if os.environ.get("FAKE_BLOCK_AT") == str(args.step):
        while not (folder / "release").exists():
            time.sleep(0.05)
    if os.environ.get("FAKE_FAIL_AT") == str(args.step):
        write_record(folder, status="failed", error="RuntimeError: step failed on purpose", **record)
        return 3
    write_record(folder, status="finished", **record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
