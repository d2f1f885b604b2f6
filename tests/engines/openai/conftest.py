"""Fixtures shared by this package's tests."""

import json

import pytest

from tests.openai_server import OpenAIServer


@pytest.fixture(scope="module")
def server():
    with OpenAIServer(delay_s=0.005) as s:
        yield s


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    path = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"prompt {i}"}) + "\n" for i in range(5)) + '"a bare string"\n')
    return str(path)
