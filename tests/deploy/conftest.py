"""Fixtures shared by this package's tests."""

import shutil

import pytest

from tests.deploy.helpers import ROOT


@pytest.fixture(scope="module")
def helm() -> str:
    found = ROOT / ".tools" / "helm"
    path = str(found) if found.exists() else shutil.which("helm")
    if path is None:
        pytest.skip("no helm: `make .tools/helm` installs it (make test does)")
    return path
