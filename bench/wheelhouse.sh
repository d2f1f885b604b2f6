#!/usr/bin/env bash
# Wheels for what a GPU host without network lacks (torch, transformers, numpy, psutil, prometheus-client,
# nvidia-ml-py, pyyaml, rich, requests, grpcio, httpx, anyio, h11, click, jinja2/markupsafe come from the host),
# enough to run the daemon there (FastAPI with fastapi-offline's /docs assets, uvicorn, SQLAlchemy with Alembic).
# Python 3.12, manylinux x86_64.
# orjson and uvloop: the openai engine's client (bench/loadgen_peers.py --processes needs nothing else); msgspec:
# the daemon↔worker messages (benchd/protocol); ruptures and scipy: change points in the history
# (benchd/measure/changes.py, bench/change_points.py).
#   bash bench/wheelhouse.sh [DIR]        (default .whl; about 45 MB, scipy most of it)
# On the GPU host, from the repository root:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
#   export PYTHONPATH=/tmp/site:src
set -euo pipefail
dir=${1:-.whl}
mkdir -p "$dir"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$dir" \
  pydantic==2.14.3 pydantic-core==2.50.4 annotated-types==0.8.0 typing-inspection==0.4.5 \
  typing-extensions==4.16.0 protobuf==7.36.2 \
  opentelemetry-api==1.45.2 opentelemetry-sdk==1.45.2 opentelemetry-semantic-conventions==0.66b2 \
  opentelemetry-exporter-otlp-proto-http==1.45.2 opentelemetry-exporter-otlp-proto-common==1.45.2 \
  opentelemetry-proto==1.45.2 googleapis-common-protos==1.76.0 opentelemetry-exporter-http-transport==0.66b2 \
  opentelemetry-exporter-otlp-common==0.66b2 \
  fastapi==0.165.0 fastapi-offline==1.7.7 starlette==1.10.0 annotated-doc==0.0.7 uvicorn==0.54.0 httptools==0.9.0 sqlalchemy==2.1.9 greenlet \
  alembic==1.20.1 mako==1.4.3 pydantic-settings==2.16.3 python-dotenv==1.2.4 \
  orjson==3.13.0 uvloop==0.23.0 msgspec==0.22.0 ruptures==1.1.10 scipy==1.17.1
ls "$dir"
