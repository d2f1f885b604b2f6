#!/usr/bin/env bash
# Wheels for the stack a matrix varies (bench/gpu_matrix.py), apart from bench/wheelhouse.sh's: torchao 0.17.0 (its
# CUDA extensions are built for torch 2.11, the GPU hosts' torch; pure-PyTorch paths need no more than torch >= 2.4)
# and bitsandbytes 0.50.2 (one wheel with its CUDA 11.8-13.2 libraries: libbitsandbytes_cuda130.so for torch
# 2.11+cu130). Their other requirements (torch, numpy, packaging) come from the host. Python 3.12, manylinux x86_64;
# about 46 MB (bitsandbytes is 43 of it).
#   bash bench/wheelhouse_stack.sh [DIR]        (default .whl, beside bench/wheelhouse.sh's)
# On the GPU host, from the repository root, as for bench/wheelhouse.sh:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
set -euo pipefail
dir=${1:-.whl}
mkdir -p "$dir"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$dir" \
  torchao==0.17.0 bitsandbytes==0.50.2
ls "$dir"
