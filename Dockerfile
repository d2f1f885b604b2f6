# benchd on a CUDA runtime; for a CPU-only image:
#   docker build --build-arg BASE_IMAGE=ubuntu:24.04 --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cpu .
ARG BASE_IMAGE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04
FROM ${BASE_IMAGE}

ARG TORCH_INDEX=https://download.pytorch.org/whl/cu128
ARG TORCH_VERSION=2.11.0
ARG TRANSFORMERS_VERSION=5.17.0

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PATH=/opt/venv/bin:$PATH
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv

# Dependencies in their own layer: a change to benchd's code does not reinstall torch.
WORKDIR /app
COPY pyproject.toml README.md ./
RUN mkdir -p src/benchd && touch src/benchd/__init__.py \
    && pip install --index-url "${TORCH_INDEX}" "torch==${TORCH_VERSION}" \
    && pip install "transformers==${TRANSFORMERS_VERSION}" . \
    && pip uninstall -y benchd

COPY src ./src
RUN pip install --no-deps . && useradd --create-home --uid 10001 benchd
USER benchd
WORKDIR /home/benchd

ENV BENCHD_HOST=0.0.0.0 \
    BENCHD_PORT=8000
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python3", "-c", "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status != 200)"]
CMD ["benchd", "serve"]
