"""What a careless or hostile client sends is refused at the door with a 422 naming the field, a 401, 413 or
429 — never accepted to fail later, never a 500, and never able to stop the daemon (each case was found on the
release before this one)."""

import json
import math
import socket
import threading

import httpx

from benchd.daemon.settings import Limits
from benchd.spec.documents import DEPTH_MAX
from benchd.store.database import TERMINAL
from tests.helpers import daemon, free_port, serve, spec, submit, wait_for


def problems(response):
    assert response.status_code == 422, response.text
    return {".".join(str(p) for p in d["loc"]): d["msg"] for d in response.json()["detail"]}


def post_raw(server, path, text, **headers):
    return server.http.post(path, content=text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text,
                            headers={"content-type": "application/json", **headers})


def test_values_json_cannot_hold_are_422_not_500(tmp_path):
    with daemon(tmp_path) as server:
        nan = post_raw(server, "/runs", '{"workload": {"stop": {"duration_s": NaN}}}')
        assert "not a number JSON allows" in problems(nan)["body"]
        huge = post_raw(server, "/runs", '{"workload": {"output_tokens": {"dist": "normal", "mean": 4, '
                                         '"std": 1e309, "max": 8}}}')
        assert "finite number" in problems(huge)["body.workload.output_tokens.normal.std"]
        surrogate = post_raw(server, "/runs", '{"label": "\\ud800"}')
        assert "lone surrogates" in problems(surrogate)["body.label"]
        nul = post_raw(server, "/runs", '{"model": "/models/a\\u0000b"}')
        assert "NUL" in problems(nul)["body.model"]
        assert "not UTF-8" in problems(post_raw(server, "/runs", b'{"label": "\xff"}'))["body"]
        assert "not valid JSON" in problems(post_raw(server, "/runs", "{"))["body"]
        assert "nested too deeply" in problems(post_raw(server, "/runs", "[" * 100_000))["body"]
        assert "valid integer" in problems(server.http.post("/runs", json={"workload": {"stop": {
            "requests": True}}}))["body.workload.stop.requests"]
        assert "Unable to extract tag" in problems(server.http.post("/runs", json={"workload": {
            "prompt_tokens": {"value": 1}}}))["body.workload.prompt_tokens"]
        assert "at most 200 characters" in problems(server.http.post("/runs", json={"label": "x" * 201}))["body.label"]
        big = server.http.post("/runs", content=json.dumps({"label": "x" * 2_000_000}),
                               headers={"content-type": "application/json"})
        assert big.status_code == 413
        offset = server.http.get("/runs", params={"offset": 9223372036854775808})
        assert "less than or equal to" in problems(offset)["query.offset"]
        assert "NUL" in problems(server.http.get("/runs", params={"workload": "a\x00"}))["query.workload"]
        assert "NUL" in problems(server.http.get("/runs/a%00b"))["path.run_id"]
        # The 422 body itself is always JSON (a NaN input is not echoed back).
        assert all(not isinstance(v, float) or math.isfinite(v) for v in json.loads(nan.text)["detail"][0].values()
                   if not isinstance(v, list))
        server.wait_ready()
        assert server.wait_status(submit(server, spec(requests=2)), "succeeded")["summary"][0]["requests"] == 2


def test_what_could_not_finish_or_fit_is_refused_before_it_is_queued(tmp_path):
    limits = Limits(max_duration_s=600, memory_bytes=64 << 20, max_flush_bytes=32 << 20)
    with daemon(tmp_path, limits=limits) as server:
        post = lambda body: server.http.post("/runs", json=body)  # noqa: E731
        slow = {"workload": {"arrivals": {"profile": "poisson", "rate": 1e-6}, "stop": {"requests": 2}}}
        assert "takes 2,000,000 s to send its requests" in problems(post(slow))["body.workload.arrivals"]
        sweep = {"workload": {"arrivals": {"profile": "sweep", "over": "constant", "values": [10, 1e-300]},
                              "stop": {"requests": 2}}}
        assert "BENCHD_LIMITS__MAX_DURATION_S" in problems(post(sweep))["body.workload.arrivals.values.1"]
        bounded = {"workload": {"arrivals": {"profile": "poisson", "rate": 1e-6},
                                "stop": {"requests": 2, "duration_s": 5}}}
        created = post(bounded)
        assert created.status_code == 202  # a duration ends it in time
        # And the user learns before the run starts how long it can take: its 5 s, its drain (30 s at least), the
        # 2 s its engine has to end what it cut; and when the daemon would stop it.
        assert created.json()["bound_s"] == 37.0 and created.json()["deadline_s"] == 1200.0
        closed = post({"workload": {"arrivals": {"profile": "concurrent", "concurrency": 2}, "stop": {"requests": 2}}})
        assert closed.json()["bound_s"] is None  # its pace is the engine's
        drains = {"workload": {"stop": {"duration_s": 5, "drain_s": 601}}}
        assert "BENCHD_LIMITS__MAX_DURATION_S" in problems(post(drains))["body.workload.stop.drain_s"]
        rounds = {"placement": "every_gpu", "decide": {"budget_s": 10**6}}
        assert "BENCHD_LIMITS__MAX_RUN_DURATION_S" in problems(post(rounds))["body.decide.budget_s"]
        alone = problems(post({"decide": {"max_rounds": 3}}))
        assert "decides a run on every GPU" in next(iter(alone.values()))
        big = post({"model": "llama-3.1-8b"})
        assert "needs about 3" in problems(big)["body.model"]  # 8B in float32 on a CPU: 32 GB
        assert "BENCHD_LIMITS__MEMORY_BYTES" in problems(big)["body.model"]
        matmul = {"kind": "kernel", "kernel": {"op": "matmul", "shapes": [{"m": 40000, "n": 40000, "k": 40000}],
                                               "flush_bytes": 1 << 20}}
        assert "needs about" in problems(post(matmul))["body.kernel.shapes"]
        flush = {"kind": "kernel", "kernel": {"op": "matmul", "shapes": [{"m": 8, "n": 8, "k": 8}],
                                              "flush_bytes": 1 << 30}}
        assert "BENCHD_LIMITS__MAX_FLUSH_BYTES" in problems(post(flush))["body.kernel.flush_bytes"]
        train = {"kind": "train_step", "train_step": {"batch_size": 512, "context_length": 4096}}
        assert "needs about" in problems(post(train))["body.train_step.batch_size"]
        schedule = {"name": "big", "spec": {"model": "llama-3.1-8b"}, "interval_s": 60}
        assert "needs about" in problems(server.http.post("/schedules", json=schedule))["body.spec.model"]


def test_the_token_is_checked_before_the_body_is_read(tmp_path):
    with daemon(tmp_path, api_token="s3cret") as server:
        for body in ("{", "[" * 10_000, '{"workload": {"stop": {"duration_s": NaN}}}', '{"bogus": 1}'):
            response = post_raw(server, "/runs", body)
            assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer", body
        assert post_raw(server, "/schedules", "{").status_code == 401
        assert server.http.put("/baselines/x", content=b"\xff").status_code == 401
        assert post_raw(server, "/runs", "{", authorization="Bearer s3cret").status_code == 422


def test_a_full_queue_says_when_to_come_back(tmp_path):
    with daemon(tmp_path, queue_max=1) as server:
        server.wait_ready()
        running = submit(server, spec(duration=60, name="long"))
        server.wait_status(running, "running")
        submit(server, spec())
        response = server.http.post("/runs", json=spec())
        assert response.status_code == 429 and int(response.headers["retry-after"]) > 0
        server.http.delete(f"/runs/{running}")


def test_the_openapi_document_describes_the_errors(tmp_path):
    with daemon(tmp_path) as server:
        document = httpx.get(f"{server.url}/openapi.json", timeout=60).json()  # built on first ask: seconds, loaded
        post = document["paths"]["/runs"]["post"]["responses"]
        assert {"202", "401", "413", "422", "429", "503"} <= set(post)
        assert "Retry-After" in post["429"]["headers"]
        fixed = document["components"]["schemas"]["FixedLength"]
        assert "dist" in fixed["required"]
        options = document["components"]["schemas"]["TransformersOptions"]["properties"]["block_size"]
        assert options["anyOf"][0]["minimum"] == 4
        run = document["components"]["schemas"]["RunView"]["properties"]["created_at"]
        assert run["format"] == "date-time"


# ---- issue 32: no secret leaves, nothing nests too deep, nothing admitted that cannot finish ----------------------


class Listener:
    """A TCP listener on loopback that keeps every byte sent to it and answers every request with a 404."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.received = bytearray()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn) -> None:
        with conn:
            conn.settimeout(5)
            try:
                while data := conn.recv(65536):
                    with self._lock:
                        self.received += data
                    if b"\r\n\r\n" in data:
                        conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                        return
            except OSError:
                return

    def close(self) -> None:
        self.sock.close()


def test_a_listener_on_loopback_gets_no_secret_whatever_the_spec_asks(tmp_path):
    """openai.api_key_env sent any variable of the daemon's (its database URL, its API token) as a bearer token to
    any base_url: only variables BENCHD_OPENAI__KEY_ENVS names go, never a BENCHD_* one, and only to the hosts
    BENCHD_OPENAI__HOSTS allows (loopback by default)."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "prompts.jsonl").write_text('{"prompt": "hello there"}\n' * 4)
    secrets = {"BENCHD_API_TOKEN": "tok-4f1c9e2a7b", "OTHER_SECRET": "other-8d2e6b1f0c"}
    listener = Listener()
    process, url = serve(tmp_path, free_port(), BENCHD_MODEL_ROOTS=json.dumps([str(root)]),
                         BENCHD_OPENAI__KEY_ENVS='["ALLOWED_KEY"]', ALLOWED_KEY="sk-allowed-5e3a", **secrets)
    http = httpx.Client(base_url=url, headers={"Authorization": "Bearer tok-4f1c9e2a7b"}, timeout=30)
    try:
        def post(**openai):
            return http.post("/runs", json={
                "name": "leak", "engine": "openai",
                "openai": {"base_url": listener.url, "connect_timeout_s": 2, "stall_timeout_s": 2, **openai},
                "workload": {"dataset": {"format": "jsonl", "path": str(root / "prompts.jsonl")},
                             "stop": {"requests": 1}}})

        for name in ("BENCHD_API_TOKEN", "BENCHD_DATABASE_URL", "benchd_api_token"):
            assert "BENCHD_*" in problems(post(api_key_env=name))["body.openai.api_key_env"], name
        for name in ("OTHER_SECRET", "HOME", "PATH"):
            assert "BENCHD_OPENAI__KEY_ENVS" in problems(post(api_key_env=name))["body.openai.api_key_env"], name
        port = listener.url.split(":")[2].split("/")[0]
        for base in ("http://10.255.255.1/v1", "http://example.com/v1", f"http://127.0.0.1.nip.io:{port}/v1",
                     f"http://x@127.0.0.1:{port}/v1", "http://[::ffff:10.0.0.1]/v1", "http:///v1"):
            assert "body.openai.base_url" in problems(post(base_url=base)), base
        assert "BENCHD_OPENAI__HOSTS" in problems(post(metrics_url="http://192.0.2.1/metrics"))["body.openai.metrics_url"]
        # What the settings allow goes where they allow it, and nothing else does.
        allowed = http.post("/runs", json={
            "name": "allowed", "engine": "openai",
            "openai": {"base_url": listener.url, "api_key_env": "ALLOWED_KEY", "connect_timeout_s": 2,
                       "stall_timeout_s": 2},
            "workload": {"dataset": {"format": "jsonl", "path": str(root / "prompts.jsonl")}, "stop": {"requests": 1}}})
        assert allowed.status_code == 202, allowed.text
        wait_for(lambda: http.get(f"/runs/{allowed.json()['id']}").json()["status"] in TERMINAL, 120)
        assert b"Authorization: Bearer sk-allowed-5e3a" in listener.received
        for secret in secrets.values():
            assert secret.encode() not in listener.received
        assert b"sqlite" not in listener.received
    finally:
        http.close()
        listener.close()
        process.terminate()
        process.wait(60)


def nested(levels: int, leaf=1):
    """levels objects inside one another: {"a": {"a": … leaf}}."""
    for _ in range(levels):
        leaf = {"a": leaf}
    return leaf


def test_nesting_at_the_limit_passes_and_past_it_is_a_422_naming_the_field(tmp_path):
    """openai.extra_body 250 levels deep passed the guard and made model_dump raise (a 500 on /runs and /schedules);
    a matrix value 495 deep made the expansion's deepcopy raise RecursionError (a 500 on /matrices). The limit is
    documents.DEPTH_MAX levels of the whole body, the same everywhere."""
    with daemon(tmp_path, queue_max=32) as server:
        post = lambda path, body: server.http.post(path, json=body)  # noqa: E731
        one = spec(requests=1)
        # body → openai → extra_body: two levels above the value's own
        at_limit = post("/runs", {**one, "openai": {"extra_body": nested(DEPTH_MAX - 2)}})
        assert at_limit.status_code == 202, at_limit.text
        for field in ("extra_body", "stream_options"):
            for levels in (DEPTH_MAX - 1, 250):
                found = problems(post("/runs", {**one, "openai": {field: nested(levels)}}))
                (where, why), = found.items()
                assert where.startswith(f"body.openai.{field}.a.a") and "nested too deeply" in why, (field, levels)
        deepest = '{"openai": {"extra_body": ' + '{"a": ' * 10_000 + "1" + "}" * 10_002
        assert "nested too deeply" in problems(post_raw(server, "/runs", deepest))["body"]

        schedule = {"name": "deep", "interval_s": 3600, "enabled": False}
        ok = post("/schedules", {**schedule, "spec": {**one, "openai": {"extra_body": nested(DEPTH_MAX - 3)}}})
        assert ok.status_code == 201, ok.text
        assert server.http.get("/schedules").status_code == 200  # what is stored serializes again
        for levels in (DEPTH_MAX - 2, 250):
            found = problems(post("/schedules", {**schedule, "spec": {"openai": {"extra_body": nested(levels)}}}))
            assert next(iter(found)).startswith("body.spec.openai.extra_body.a"), found

        matrix = {**one, "repeats": 1}
        ok = post("/matrices", {**matrix, "matrix": {"openai.extra_body": [nested(DEPTH_MAX - 3)]}})
        assert ok.status_code == 202, ok.text
        for levels in (DEPTH_MAX - 2, 495):
            found = problems(post("/matrices", {**matrix, "matrix": {"openai.extra_body": [nested(levels)]}}))
            assert next(iter(found)).startswith("body.matrix.openai.extra_body.0.a"), found


def test_every_request_model_is_strict_and_finite(tmp_path):
    """interval_s 1e309 was stored as Infinity (and listed as null), true and "3600" were taken, so were repeats
    true and "5"; /compare echoed threshold=1e309 as null; and a matrix that never fits the queue was a 429."""
    with daemon(tmp_path) as server:
        good = {"name": "strict", "spec": spec(requests=2), "interval_s": 3600, "enabled": False}
        for field, text, why in (("interval_s", "1e309", "finite number"), ("interval_s", "true", "valid number"),
                                 ("interval_s", '"3600"', "valid number"), ("enabled", "0", "valid boolean"),
                                 ("enabled", '"true"', "valid boolean")):
            body = json.dumps({**good, field: "@"}).replace('"@"', text)
            assert why in problems(post_raw(server, "/schedules", body))[f"body.{field}"], (field, text)
        assert server.http.get("/schedules").json() == []
        assert server.http.post("/schedules", json=good).status_code == 201
        (listed,) = server.http.get("/schedules").json()
        assert listed["interval_s"] == 3600.0 and listed["enabled"] is False

        matrix = {**spec(requests=2), "matrix": {"static.batch_size": [1, 2]}}
        for field, text in (("repeats", "true"), ("repeats", '"5"'), ("repeats", "1e309"), ("baseline", "true")):
            body = json.dumps({**matrix, field: "@"}).replace('"@"', text)
            assert f"body.{field}" in problems(post_raw(server, "/matrices", body)), (field, text)
        huge = {**spec(requests=2), "matrix": {"static.batch_size": list(range(1, 65))}, "repeats": 100}
        assert "6,400 runs, more than the run queue ever holds (16" in problems(
            server.http.post("/matrices", json=huge))["body.repeats"]

        for name, value in (("threshold", "1e309"), ("threshold", "-1e309"), ("threshold", "nan"),
                            ("confidence", "inf")):
            found = problems(server.http.get("/compare", params={"a": "x", "b": "y", name: value}))
            assert f"query.{name}" in found, (name, value)


def test_time_is_admitted_like_memory(tmp_path):
    """A 40000³ matmul fit a 24 GiB host and took about 16 minutes a call, 110 calls: admitted for lack of a time
    check. Time is judged at the device's speed, measured once by its worker (/readyz shows it)."""
    limits = Limits(max_duration_s=600, memory_bytes=1 << 30)
    with daemon(tmp_path, limits=limits) as server:
        server.wait_ready()
        (worker,) = server.http.get("/readyz").json()["workers"]
        assert worker["speed"]["matmul_flops_per_s"]["float32"] > 1e8 and worker["speed"]["copy_bytes_per_s"] > 1e8
        post = lambda body: server.http.post("/runs", json=body)  # noqa: E731
        found = problems(post({"kind": "kernel", "kernel": {"op": "matmul", "shapes": [
            {"m": 8, "n": 8, "k": 8}, {"m": 40000, "n": 40000, "k": 40000}]}}))
        why = found["body.kernel.shapes.1"]  # the shape that takes the time
        assert "BENCHD_LIMITS__MAX_DURATION_S" in why and "GFLOP/s float32" in why and " h " in why
        assert "needs about" in found["body.kernel.shapes"]  # and its memory, as before
        small = {"kind": "kernel", "kernel": {"op": "matmul", "shapes": [{"m": 64, "n": 64, "k": 64}], "repeats": 5,
                                              "flush_bytes": 1 << 20}}
        assert post(small).status_code == 202
        # 2,000 requests of 512 tokens, one at a time: each output token reads the small model's ~0.5 GB of weights
        closed = {"model": "small", "transformers": {"block_size": 32, "num_blocks": 32},
                  "workload": {"arrivals": {"profile": "concurrent", "concurrency": 1}, "stop": {"requests": 2000},
                               "prompt_tokens": {"dist": "fixed", "value": 8},
                               "output_tokens": {"dist": "fixed", "value": 512}}}
        assert "at their shortest lengths, 1 at a time" in problems(post(closed))["body.workload.stop.requests"]
        # one request of 8,192 tokens of an 8B model (32 GB of weights a token) after the last is sent
        single = {"model": "llama-3.1-8b", "transformers": {"block_size": 32, "num_blocks": 260},
                  "workload": {"arrivals": {"profile": "poisson", "rate": 1}, "stop": {"requests": 2},
                               "prompt_tokens": {"dist": "fixed", "value": 8},
                               "output_tokens": {"dist": "fixed", "value": 8192}}}
        assert "one request of 8 + 8192 tokens should take at least" in problems(post(single))[
            "body.workload.output_tokens"]


def test_what_the_model_or_its_cache_cannot_hold_is_refused_before_202(tmp_path, tiny_dir):
    """A 4,096-token prompt with 8 output tokens on the tiny model (4,096 positions), and a cache of one block, were
    accepted and failed in the worker: both are known from the spec and the model's config (a preset's shape, a
    directory's config.json)."""
    with daemon(tmp_path, model_roots=[tiny_dir.parent]) as server:
        post = lambda body: server.http.post("/runs", json=body)  # noqa: E731
        long = spec(requests=1, output=8)
        long["workload"]["prompt_tokens"] = {"dist": "fixed", "value": 4096}
        long["transformers"] = {**long["transformers"], "num_blocks": 512}
        why = "prompt + output may reach 4104 tokens, beyond the model's 4096 positions"
        assert why in problems(post(long))["body.workload.prompt_tokens"]
        assert why in problems(post({**long, "model": str(tiny_dir)}))["body.workload.prompt_tokens"]  # config.json
        small_cache = spec(requests=1, output=32)
        small_cache["transformers"] = {**small_cache["transformers"], "num_blocks": 1}
        assert "the cache holds 1 × 16 tokens, but one request may need 40" in problems(post(small_cache))[
            "body.transformers.num_blocks"]
        train = {"kind": "train_step", "train_step": {"context_length": 5000, "batch_size": 1}}
        assert "5000 is beyond the model's 4096 positions" in problems(post(train))["body.train_step.context_length"]
        at_limit = spec(requests=1, output=8)
        at_limit["workload"]["prompt_tokens"] = {"dist": "fixed", "value": 4088}
        at_limit["transformers"] = {**at_limit["transformers"], "num_blocks": 256}
        assert post(at_limit).status_code == 202
