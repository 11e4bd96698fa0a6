#!/usr/bin/env bash
# Download tests/gpu/device-wheels.txt as CPython 3.12 manylinux wheels into .whl/ (ignored by git), for the
# lent GPU machine, which reaches no package registry.  Run from the project root.
set -euo pipefail
mkdir -p .whl
grep -v '^#' tests/gpu/device-wheels.txt | xargs python3 -m pip download -q --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  --platform manylinux_2_24_x86_64 --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64 \
  --platform manylinux_2_35_x86_64 -d .whl
ls .whl | wc -l
