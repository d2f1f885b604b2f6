"""Fixtures shared by this package's tests."""


import pytest

from tests.browser import Chromium


@pytest.fixture(scope="package")
def chromium():
    """One real chromium for the package's pages."""
    with Chromium() as browser:
        yield browser
