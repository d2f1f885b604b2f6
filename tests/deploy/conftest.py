"""Fixtures shared by this package's tests."""

import shutil
from importlib.metadata import version

import pytest

from tests import podman
from tests.deploy.helpers import ROOT


@pytest.fixture(scope="module")
def helm() -> str:
    found = ROOT / ".tools" / "helm"
    path = str(found) if found.exists() else shutil.which("helm")
    if path is None:
        pytest.skip("no helm: `make .tools/helm` installs it (make test does)")
    return path


# Session-scoped: the image is built once for every test that starts it (the chart's pod, the image, the stack), all
# on one worker under pytest-xdist (their xdist_group "podman"); a build a module apart cost a cold CI 110 s.
@pytest.fixture(scope="session")
def base():
    reason = podman.unavailable()
    if reason:
        pytest.skip(reason)
    return podman.base_image()


@pytest.fixture(scope="session")
def benchd_image(base) -> str:
    """The committed Dockerfile, CPU variant: the torch of the tests' own environment (`make setup` installs
    the CPU build), from wherever pip takes it on this host."""
    return podman.build("localhost/benchd-test:cpu", ROOT, BASE_IMAGE=base, TORCH_INDEX="",
                        TORCH_VERSION=version("torch"))
