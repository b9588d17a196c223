# Tandem: the two commands are `make demo` and `make test` (see README.md).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEBIAN_PACKAGES := prometheus chromium poppler-utils

.PHONY: demo test test-fast lint format bench soak screenshots debian-packages clean

$(STAMP): requirements.txt
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	@touch $(STAMP)

# Debian packages the demo and the tests run for real: Prometheus (+ promtool), Chromium,
# pdftotext/pdftoppm, and a compose client to validate docker-compose.yml. Installed only when missing, so a prepared machine pays nothing.
debian-packages:
	@missing=""; \
	command -v promtool >/dev/null || missing="$$missing prometheus"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v pdftotext >/dev/null || missing="$$missing poppler-utils"; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null || missing="$$missing docker-compose"; \
	if [ -n "$$missing" ]; then \
	  echo "==> installing Debian packages:$$missing"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi

demo: debian-packages $(STAMP)
	$(PY) -m config.demo

# One xdist worker more than the cores: the soak waits minutes of real time on its faults and
# many tests wait on Prometheus, Celery or Chromium, while the cores could run another test.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
# Groups of tests that share a simulated pool stay on one worker, the longest first, in the order
# tests/conftest.py gives them (`--no-loadscope-reorder`).
XDIST = -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

# The app graph's contracts (import-linter, pyproject.toml), then the whole suite (above). The 15
# slowest tests are listed at the end.
test: debian-packages $(STAMP)
	$(PY) -m ruff check --no-cache .
	$(VENV)/bin/lint-imports --no-cache --no-logo
	$(PY) -m pytest $(XDIST) --durations=15 $(PYTEST_ARGS)

# The inner loop: every test but those marked `slow` (they start Prometheus, a Celery worker or
# Chromium; tests/slow.py fails one that starts them unmarked), keeping the test databases of the
# last run (`--reuse-db`; add PYTEST_ARGS=--create-db after a new migration).
test-fast: debian-packages $(STAMP)
	$(PY) -m pytest -m "not slow" --reuse-db $(XDIST) $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check --no-cache .
	$(PY) -m ruff format --check .
	$(VENV)/bin/lint-imports --no-cache --no-logo

format: $(STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

clean:
	rm -rf var/prometheus var/simulated

# Every dashboard page at 1440x900 into docs/screenshots/, from the demo's data (run `make demo` once first).
screenshots: debian-packages $(STAMP)
	$(PY) manage.py screenshots --out docs/screenshots --username demo

# Every benchmarks/*.py, one table of figures against same-run references
# (`make bench BENCH_ARGS=--quick` for a ~3.5 minute run).
bench: debian-packages $(STAMP)
	$(PY) benchmarks/run.py $(BENCH_ARGS)

# The soak (issue 7): the whole stack on loopback under faults for about 10 minutes; prints the table.
soak: debian-packages $(STAMP)
	$(PY) -m tests.soak.harness --minutes 10
