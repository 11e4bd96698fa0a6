#!/usr/bin/env bash
# tests/gpu/device-wheels.txt as CPython wheels into .whl/ (ignored by git), for a machine that reaches no package
# registry: manylinux x86_64 wheels for PYTHON_VERSION (default 3.12, the lent GPU machine's), and a pure-Python
# wheel built here for each line marked "no wheel" (source archive only).  Run from the project root.
#   PYTHON_VERSION, WHEEL_DIR (default .whl), WHEEL_LISTS (default tests/gpu/device-wheels.txt; several: spaces)
set -euo pipefail
python_version=${PYTHON_VERSION:-3.12}
dest=${WHEEL_DIR:-.whl}
lists=${WHEEL_LISTS:-tests/gpu/device-wheels.txt}
mkdir -p "$dest"
# shellcheck disable=SC2086
cat $lists | grep -v '^#' | grep -v 'no wheel' | sed 's/ *#.*//' | xargs python3 -m pip download -q \
  --no-deps --only-binary=:all: --python-version "$python_version" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64 -d "$dest"
# shellcheck disable=SC2086
cat $lists | grep 'no wheel' | sed 's/ *#.*//' | xargs python3 -m pip wheel -q --no-deps --no-binary=:all: -w "$dest"
ls "$dest" | wc -l
