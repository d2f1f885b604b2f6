import pytest

from benchd.models import load_model


@pytest.fixture(scope="session")
def tiny():
    """The tiny preset on CPU in float32, shared: engines never change its weights."""
    return load_model("tiny", dtype="float32", device="cpu", seed=0)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory, tiny):
    """The tiny model saved with save_pretrained, for the from_pretrained path."""
    path = tmp_path_factory.mktemp("tiny-model")
    tiny.model.save_pretrained(path)
    return path
