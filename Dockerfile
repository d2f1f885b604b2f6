# benchd. By default on CUDA 13.0 with torch 2.11.0+cu130 and transformers 5.17.0 on Ubuntu 24.04's Python 3.12,
# the stack the GPU benchmarks ran on (docs/benchmarks.md); the host needs an NVIDIA driver >= 580 and the NVIDIA
# Container Toolkit. torch's wheels bring CUDA's libraries (cuBLAS, cuDNN, NCCL), so the base is CUDA's smallest
# image: it carries the driver requirement (NVIDIA_REQUIRE_CUDA) and the device variables.
# CPU only (compose.cpu.yml does this):
#   docker build --build-arg BASE_IMAGE=ubuntu:24.04 --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cpu .
# An empty TORCH_INDEX takes torch from pip's own configuration (index, find-links): tests/podman.py builds so.
ARG BASE_IMAGE=nvidia/cuda:13.0.0-base-ubuntu24.04
FROM ${BASE_IMAGE}

ARG TORCH_INDEX=https://download.pytorch.org/whl/cu130
ARG TORCH_VERSION=2.11.0
ARG TRANSFORMERS_VERSION=5.17.0

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PATH=/opt/venv/bin:$PATH
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv \
    && useradd --create-home --uid 10001 --user-group benchd

# Dependencies in their own layer, read from pyproject.toml alone: a change to benchd's code does not reinstall
# torch. benchd itself is not built in this layer: a build/ directory left here once held an empty __init__.py
# newer than the real one, and setuptools kept it.
COPY pyproject.toml /tmp/benchd/
RUN python3 -c "import tomllib; print(*tomllib.load(open('/tmp/benchd/pyproject.toml', 'rb'))['project']['dependencies'], sep='\n')" \
        > /tmp/benchd/requirements.txt \
    && pip install ${TORCH_INDEX:+--index-url "$TORCH_INDEX"} "torch==${TORCH_VERSION}" \
    && pip install -r /tmp/benchd/requirements.txt "transformers==${TRANSFORMERS_VERSION}" \
    && rm -rf /tmp/benchd

# benchd from a fresh copy of its sources, built and removed in one step.
COPY pyproject.toml README.md /tmp/benchd/
COPY src /tmp/benchd/src
RUN pip install --no-deps /tmp/benchd && rm -rf /tmp/benchd

# A numeric user, so that Kubernetes' runAsNonRoot can check it. Its home is the working directory (the default
# SQLite store, caches); /tmp stays writable for worker processes, and /dev/shm is the runtime's (compose sizes it).
USER 10001:10001
WORKDIR /home/benchd
# The API on 8000; /metrics, /healthz and /readyz also on 8001, a listener of their own that no client's load or
# connections delay (as DCGM exporter serves its metrics apart: docs/guides/daemon.md, "Connections and probes"):
# Prometheus scrapes it and the health check asks it.
ENV HOME=/home/benchd \
    BENCHD_HOST=0.0.0.0 \
    BENCHD_PORT=8000 \
    BENCHD_HTTP__PROBE_PORT=8001
EXPOSE 8000 8001
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python3", "-c", "import os, sys, urllib.request; url = 'http://127.0.0.1:%s/healthz' % os.environ['BENCHD_HTTP__PROBE_PORT']; sys.exit(urllib.request.urlopen(url, timeout=4).status != 200)"]
CMD ["benchd", "serve"]
