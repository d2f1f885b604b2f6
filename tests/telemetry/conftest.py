"""Fixtures shared by this package's tests."""


import pytest
from prometheus_client import CollectorRegistry


@pytest.fixture
def registry():
    return CollectorRegistry()


@pytest.fixture
def otlp_env(monkeypatch):
    def configure(endpoint, protocol="http/protobuf", **extra):
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        monkeypatch.setenv("OTEL_SERVICE_NAME", "benchd-test")
        for key, val in extra.items():
            monkeypatch.setenv(key, val)
    return configure
