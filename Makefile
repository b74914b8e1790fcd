# Two commands: `make demo` and `make test`. Each creates .venv if missing and installs the
# pinned dependencies (idempotent: a stamp file skips the install when nothing changed).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.fl_uav-installed
DEMO_OUT ?= runs/demo

.PHONY: demo test lint install bench clean-venv ament

# The real `ros2 launch` and `ros2` command line (pure-Python ROS 2 packages), where the
# workspace ships them beside this checkout; without them the launch tests skip, named.
ROS2_TOOLS ?= ../shared/ros2_tools

FMNIST_DIR := /usr/share/datasets/fashion-mnist

$(STAMP): requirements.txt requirements-ray.txt setup.py package.xml
	@test -d $(FMNIST_DIR) || { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
	  apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist >/dev/null; } || \
	  echo "note: Debian package dataset-fashion-mnist not installed (FMNIST tests will skip)"
	@command -v ign >/dev/null || { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
	  apt-get update -qq && apt-get install -y -qq ignition-tools libsdformat-dev >/dev/null; } || \
	  echo "note: ign sdf (Debian ignition-tools, libsdformat-dev) not installed (the Gazebo world check will skip)"
	@command -v nft >/dev/null || { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
	  apt-get update -qq && apt-get install -y -qq nftables >/dev/null; } || \
	  echo "note: nft (Debian nftables) not installed (the lossy-link test will skip; it needs root too)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -U pip
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	# the optional extra: engine.backend ray (fl-uav experiment on Ray, one machine or many)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-ray.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e .
	@if [ -f $(ROS2_TOOLS)/install.sh ]; then bash $(ROS2_TOOLS)/install.sh $(VENV); \
	  else echo "note: $(ROS2_TOOLS) not found: no ros2 launch / ros2 CLI (launch tests will skip)"; fi
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m fl_uav.cli sim --drones 4 --rounds 10 --out $(DEMO_OUT) --overwrite

test: $(STAMP)
	$(PY) -m ruff check fl_uav test bench launch examples
	$(PY) -m pytest -q -rs -p no:cacheprovider --durations=8 -n 2 --dist loadgroup test

# Yardstick (not part of the tests): the experiment engine's trainer vs a plain PyTorch loop vs
# Flower 1.41 (own venv, telemetry off, num_cpus=1), same workload; see docs/benchmarks/engine.md.
FLOWER_VENV := bench/.venv-flower
$(FLOWER_VENV)/.installed:
	@test -x $(FLOWER_VENV)/bin/python || $(PYTHON) -m venv $(FLOWER_VENV)
	$(FLOWER_VENV)/bin/python -m pip install -q --disable-pip-version-check torch==2.13.0 \
	  'flwr[simulation]==1.41.0' scikit-learn==1.9.1
	@touch $@

bench: $(STAMP) $(FLOWER_VENV)/.installed
	FLWR_TELEMETRY_ENABLED=0 $(PY) bench/vectorized_training.py \
	  --engines plain,vectorized,experiment,experiment_seq,flower --reps 3

# An ament install prefix as colcon lays it out (share/ament_index, share/fl_uav/{launch,config,
# sim}, lib/fl_uav/<executables>: the nodes and fl-uav, as setup.cfg's install_scripts puts them),
# built by pip from setup.py without colcon, for
# `AMENT_PREFIX_PATH=$$PWD/install ros2 launch fl_uav ...`. The nodes run the venv's fl_uav (the
# editable install), so the prefix holds no second copy of the package.
AMENT_PREFIX ?= $(CURDIR)/install
ament: $(STAMP)
	rm -rf $(AMENT_PREFIX)
	$(PY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation \
	  --ignore-installed --prefix $(AMENT_PREFIX) .
	rm -rf $(AMENT_PREFIX)/lib/python3* build fl_uav.egg-info
	mkdir -p $(AMENT_PREFIX)/lib/fl_uav && mv $(AMENT_PREFIX)/bin/* $(AMENT_PREFIX)/lib/fl_uav/
	rmdir $(AMENT_PREFIX)/bin
	@echo "AMENT_PREFIX_PATH=$(AMENT_PREFIX) $(VENV)/bin/ros2 launch fl_uav fleet_sim.launch.py"

lint: $(STAMP)
	$(PY) -m ruff check fl_uav test bench launch examples

clean-venv:
	rm -rf $(VENV)
