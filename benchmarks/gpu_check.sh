#!/usr/bin/env bash
# GPU smoke check, a few minutes on one GPU: a tiny randomly initialised Qwen2-shaped model with the SmolLM2
# tokenizer runs batched generation, GRPO steps with process advantages (ProcessGRPOTrainer, advantage_mode
# process, a simple step scorer, transformers generation) and one PUM scoring pass; prints tokens/s, step time
# and peak memory as "gpu_check: <key>: <value>" lines, "gpu_check: OK" last (the work: benchmarks/gpu_check.py).
#
#   bash benchmarks/gpu_check.sh                        # one CUDA GPU (--device cuda, the default)
#   bash benchmarks/gpu_check.sh --device cpu --hidden 64 --layers 2 --max_new_tokens 16   # CPU (tests/test_gpu_check.py)
#   bash benchmarks/gpu_check.sh --bundle [--python 3.12]   # here: prepare build/gpu_check/ for a bare machine
#
# A bare GPU machine (torch, transformers and accelerate installed; no internet, no vLLM) gets the rest in two moves:
#   1. HERE (.venv set up, a package index reachable): `bash benchmarks/gpu_check.sh --bundle --python X.Y` with
#      the target's Python version (`python3 -c 'import sys; print(sys.version[:4])'` there; default: this one).
#      It writes build/gpu_check/ (ignored by git):
#        tokenizer/  the SmolLM2 tokenizer files (from `procrl model path`, tokenizer.json gzipped; no model
#                    weights: the check's model is random);
#        wheels/     `pip download --no-deps` of TRL and of the packages that TRL and procrl import beyond
#                    torch/transformers/accelerate (BUNDLE below), at the versions of .venv (but datasets 4.8.5 and
#                    pyarrow 21.0.0: size) built for Python X.Y on manylinux x86-64 (binary ones too: pyarrow, pandas,
#                    xxhash); 57 MiB with the tokenizer, pyarrow 41 of it.
#   2. THERE, in a copy of this repository with build/gpu_check/ carried along: `bash benchmarks/gpu_check.sh`.
#      The first run unpacks wheels/ into build/gpu_check_work/site/ (python's zipfile; no pip, no network;
#      outside build/gpu_check, so the carried folder stays small), which is APPENDED to sys.path, so the machine's own packages win wherever it has them; procrl comes from
#      this source tree through a symlink farm (build/gpu_check_work/src/procrl = procrl/ plus rewards/, trainers/,
#      data_builders/ as its subpackages: pyproject's package-dir map), so nothing is built or installed there.
#      Where procrl is already importable (the .venv here), the farm is not used.
# The machine's transformers may be older than pyproject's floor (5.20); the check prints the versions it ran on.
# Environment: PYTHON (interpreter; default python3, or .venv/bin/python when it exists).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/build/gpu_check"        # the bundle (carried): wheels/, tokenizer/
WORK="$ROOT/build/gpu_check_work"  # made from it where the check runs (not carried): site/, src/, tokenizer/
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
# What TRL 1.16 and procrl's GRPO/PUM path import beyond torch, transformers, accelerate and their own dependencies
# (numpy, huggingface_hub, httpx, tokenizers, safetensors, pyyaml, regex, tqdm, packaging, psutil, sympy, ...):
# measured by importing the check in a venv holding only torch 2.13, transformers 5.17 and accelerate.
BUNDLE=(trl datasets pyarrow pandas python-dateutil tzdata dill multiprocess xxhash requests urllib3
        charset-normalizer math-verify latex2sympy2_extended antlr4-python3-runtime peft)

bundle() {
    local pyver="$1" names=() pkg version
    rm -rf "$OUT" "$WORK" && mkdir -p "$OUT/wheels" "$OUT/tokenizer"
    for pkg in "${BUNDLE[@]}"; do  # the versions of this project's .venv, so the check runs what the tests run
        version="$("$PYTHON" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$pkg")"
        # Two exceptions keep the bundle under the 64 MiB that a lent GPU machine takes: pyarrow's wheel is 55 MB at
        # .venv's 26.0 and 43 MB at 21.0 (TRL's floor), which datasets 4.8 accepts (5.x wants >= 24, and its
        # fingerprinting fails with 24.0: "Can't pickle <class 'MonthDayNano'>"). Measured in a venv with only
        # torch 2.13, transformers 5.17 and accelerate: the check passes with these two.
        case "$pkg" in
            pyarrow) version="${PYARROW_VERSION:-21.0.0}" ;;
            datasets) version="${DATASETS_VERSION:-4.8.5}" ;;
        esac
        names+=("$pkg==$version")
    done
    "$PYTHON" -m pip download --quiet --no-deps --dest "$OUT/wheels" --only-binary=:all: --python-version "$pyver" \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 "${names[@]}"
    local model
    model="$("$PYTHON" -c 'from procrl.models import resolve_model; print(resolve_model("default"))')"
    for f in tokenizer_config.json special_tokens_map.json chat_template.jinja; do
        if [[ -f "$model/$f" ]]; then cp "$model/$f" "$OUT/tokenizer/"; fi
    done
    gzip -9 -c "$model/tokenizer.json" > "$OUT/tokenizer/tokenizer.json.gz"  # 3.4 MB -> 0.8; unpacked there
    du -sh "$OUT/wheels" "$OUT/tokenizer"
    echo "gpu_check: bundle for Python $pyver in $OUT (carry build/gpu_check with the repository)"
}

# Unpack the bundled wheels into site/ (a wheel is a zip of its site-packages files; none of BUNDLE needs its
# .data/ scripts), once; no pip, no network.
unpack() {
    "$PYTHON" - "$OUT/wheels" "$WORK/site" <<'PY'
import pathlib, sys, zipfile
wheels, site = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
site.mkdir(parents=True, exist_ok=True)
for wheel in sorted(wheels.glob("*.whl")):
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site, [n for n in z.namelist() if not n.split("/", 1)[0].endswith(".data")])
print(f"gpu_check: bundle: unpacked {len(list(wheels.glob('*.whl')))} wheels into {site}")
PY
    touch "$WORK/site/.unpacked"
}

ARGS=()
TOKENIZER=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --bundle) MODE=bundle; shift ;;
        --python) PYVER="$2"; shift 2 ;;
        --tokenizer) TOKENIZER="$2"; shift 2 ;;
        *) ARGS+=("$1"); shift ;;
    esac
done
if [[ "${MODE:-check}" == bundle ]]; then
    bundle "${PYVER:-$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')}"
    exit 0
fi

SITE=""
if [[ -d "$OUT/wheels" ]]; then
    [[ -f "$WORK/site/.unpacked" ]] || unpack
    SITE="$WORK/site"
fi
# procrl: installed (the .venv) or from this source tree through a symlink farm (pyproject's package-dir map)
if ! PYTHONPATH="" "$PYTHON" -c 'import sys; sys.path.append(sys.argv[1]); import procrl.trainers' "$SITE" 2>/dev/null; then
    rm -rf "$WORK/src" && mkdir -p "$WORK/src/procrl"
    for entry in "$ROOT"/procrl/*; do ln -s "$entry" "$WORK/src/procrl/"; done
    for sub in rewards trainers data_builders; do ln -s "$ROOT/$sub" "$WORK/src/procrl/$sub"; done
    export PYTHONPATH="$WORK/src${PYTHONPATH:+:$PYTHONPATH}"
fi
if [[ -z "$TOKENIZER" ]]; then
    if [[ -d "$OUT/tokenizer" ]]; then
        rm -rf "$WORK/tokenizer" && mkdir -p "$WORK" && cp -r "$OUT/tokenizer" "$WORK/tokenizer"
        gzip -d "$WORK/tokenizer/tokenizer.json.gz"
        TOKENIZER="$WORK/tokenizer"
    else TOKENIZER="$("$PYTHON" -c 'from procrl.models import resolve_model; print(resolve_model("default"))')"; fi
fi
export TOKENIZERS_PARALLELISM=false TRL_EXPERIMENTAL_SILENCE=1 WANDB_MODE=disabled
exec "$PYTHON" -c 'import runpy, sys
site, sys.argv = sys.argv[1], sys.argv[2:]
if site:
    sys.path.append(site)  # after site-packages: the machine'"'"'s own packages win
runpy.run_path(sys.argv[0], run_name="__main__")' "$SITE" "$ROOT/benchmarks/gpu_check.py" --tokenizer "$TOKENIZER" "${ARGS[@]}"
