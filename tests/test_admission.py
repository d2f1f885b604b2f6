"""What a careless or hostile client sends is refused at the door with a 422 naming the field, a 401, 413 or
429 — never accepted to fail later, never a 500, and never able to stop the daemon (each case was found on the
release before this one)."""

import json
import math

import httpx

from benchd.config import Limits
from tests.helpers import daemon, spec, submit


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
        assert post(bounded).status_code == 202  # a duration ends it in time
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
        document = httpx.get(f"{server.url}/openapi.json").json()
        post = document["paths"]["/runs"]["post"]["responses"]
        assert {"202", "401", "413", "422", "429", "503"} <= set(post)
        assert "Retry-After" in post["429"]["headers"]
        fixed = document["components"]["schemas"]["FixedLength"]
        assert "dist" in fixed["required"]
        options = document["components"]["schemas"]["TransformersOptions"]["properties"]["block_size"]
        assert options["anyOf"][0]["minimum"] == 4
        run = document["components"]["schemas"]["RunView"]["properties"]["created_at"]
        assert run["format"] == "date-time"
