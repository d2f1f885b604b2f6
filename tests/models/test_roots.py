"""BENCHD_MODEL_ROOTS is checked twice: at admission, and in the worker as it loads, on what it opened. A model
directory, a trace or a dataset swapped for a link to outside the roots between the two fails its run with that
cause, and nothing outside is read."""

import json
import shutil

import pytest

from benchd.models.confinement import PathChanged, open_confined, open_under
from tests.helpers import daemon, free_port, spec, submit


def test_what_was_opened_is_what_is_checked_and_read(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "trace.jsonl").write_text("inside\n")
    (outside / "trace.jsonl").write_text("outside\n")
    opened = open_under("workload.arrivals.path", str(root / "trace.jsonl"), [str(root)])
    try:
        (root / "trace.jsonl").rename(tmp_path / "moved.jsonl")
        (root / "trace.jsonl").symlink_to(outside / "trace.jsonl")  # swapped after the check
        with open(opened.path) as f:
            assert f.read() == "inside\n"  # what was checked, not what the path leads to now
    finally:
        opened.close()
    with pytest.raises(PathChanged, match="now leads to .*outside BENCHD_MODEL_ROOTS"):
        open_under("workload.arrivals.path", str(root / "trace.jsonl"), [str(root)])
    with pytest.raises(PathChanged, match="not under BENCHD_MODEL_ROOTS"):
        open_under("model", str(root / ".." / "outside"), [str(root)])
    data = {"model": str(root), "workload": {"arrivals": {"profile": "trace", "path": str(tmp_path / "moved.jsonl")}}}
    confined, opened = open_confined(data, {"roots": [str(tmp_path)], "paths": {
        "model": str(root), "workload.arrivals.path": str(tmp_path / "moved.jsonl")}})
    try:
        assert confined["model"] == str(root)  # loaded from its descriptor, named as given
        assert confined["workload"]["arrivals"]["path"] == opened["workload.arrivals.path"].path
        assert data["workload"]["arrivals"]["path"] == str(tmp_path / "moved.jsonl")  # the caller's is untouched
    finally:
        for item in opened.values():
            item.close()


def test_a_path_swapped_between_admission_and_load_fails_the_run_with_that_cause(tmp_path, tiny_dir):
    root, outside = tmp_path / "root", tmp_path / "outside"
    for place in (root, outside):
        shutil.copytree(tiny_dir, place / "model")
        (place / "trace.jsonl").write_text("".join(
            f'{{"offset_s": {i / 10}, "prompt_tokens": 4, "output_tokens": 2}}\n' for i in range(3)))
        (place / "prompts.jsonl").write_text('{"prompt": "hello"}\n' * 2)
    with daemon(tmp_path, model_roots=[root]) as server:
        server.wait_ready()
        hold = submit(server, spec(duration=120, name="hold"))  # the worker is busy: the next runs wait, admitted
        server.wait_status(hold, "running")
        short = spec(requests=2)
        model_run = submit(server, {**short, "model": str(root / "model")})
        trace_run = submit(server, {**short, "workload": {
            **short["workload"], "arrivals": {"profile": "trace", "path": str(root / "trace.jsonl")}}})
        dataset_run = submit(server, {
            "engine": "openai", "openai": {"base_url": f"http://127.0.0.1:{free_port()}/v1", "connect_timeout_s": 1},
            "workload": {"dataset": {"format": "jsonl", "path": str(root / "prompts.jsonl")}, "stop": {"requests": 1}}})
        for name in ("model", "trace.jsonl", "prompts.jsonl"):
            (root / name).rename(tmp_path / f"admitted-{name}")
            (root / name).symlink_to(outside / name)
        server.http.delete(f"/runs/{hold}")
        for run_id, field, name in ((model_run, "model", "model"), (trace_run, "workload.arrivals.path", "trace.jsonl"),
                                    (dataset_run, "workload.dataset.path", "prompts.jsonl")):
            run = server.wait_status(run_id, "failed", "succeeded")
            assert run["status"] == "failed" and run["error_stage"] == "load", (field, run["status"], run["error"])
            assert f"PathChanged: {field}: {str(root / name)!r} now leads to {str(outside / name)!r}, outside " \
                   "BENCHD_MODEL_ROOTS: it changed after the run was admitted" in run["error"], run["error"]
        # put back, the same path loads again (from what it opened)
        (root / "model").unlink()
        (tmp_path / "admitted-model").rename(root / "model")
        again = server.wait_status(submit(server, {**short, "model": str(root / "model")}), "succeeded", "failed")
        assert again["status"] == "succeeded", again["error"]
        assert again["model"] == str(root / "model") and "/proc/self/fd" not in json.dumps(again)  # as given
