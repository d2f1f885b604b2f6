--
-- PostgreSQL database dump
--

\restrict 8QaqAGkqnIfskKcDx8TUNGSFSYbCEVbRIh1CNtPTqPbZpAbV1oo4HklwpezVx18

-- Dumped from database version 15.18 (Debian 15.18-0+deb12u1)
-- Dumped by pg_dump version 15.18 (Debian 15.18-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: alembic_version; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.alembic_version (
    version_num character varying(32) NOT NULL
);


--
-- Name: baselines; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.baselines (
    workload character varying(100) NOT NULL,
    run_id character varying(32) NOT NULL,
    set_at timestamp with time zone NOT NULL
);


--
-- Name: matrices; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.matrices (
    id character varying(32) NOT NULL,
    status character varying(16) NOT NULL,
    workload character varying(100) NOT NULL,
    document jsonb NOT NULL,
    variants jsonb NOT NULL,
    runs jsonb NOT NULL,
    baseline integer NOT NULL,
    comparison jsonb,
    error text,
    node character varying(253),
    created_at timestamp with time zone NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone
);


--
-- Name: requests; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.requests (
    run_id character varying(32) NOT NULL,
    stage_index integer NOT NULL,
    stage character varying(100),
    index integer NOT NULL,
    request_id character varying(64),
    warmup boolean NOT NULL,
    prompt_tokens integer,
    max_new_tokens integer,
    output_tokens integer,
    scheduled_s double precision,
    submitted_s double precision,
    admitted_s double precision,
    finished_s double precision,
    dispatch_lag_s double precision,
    queue_s double precision,
    ttft_s double precision,
    tpot_s double precision,
    e2e_s double precision,
    error text,
    trace_id character varying(32),
    arrival_s jsonb,
    arrival_tokens jsonb,
    gpu character varying(32) DEFAULT ''::character varying NOT NULL,
    token_ids jsonb
);


--
-- Name: run_stages; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_stages (
    run_id character varying(32) NOT NULL,
    stage_index integer NOT NULL,
    stage character varying(100) NOT NULL,
    status character varying(16) NOT NULL,
    requests integer NOT NULL,
    errors integer NOT NULL,
    duration_s double precision NOT NULL,
    output_tokens_per_s double precision NOT NULL,
    requests_per_s double precision NOT NULL,
    ttft_p50_s double precision,
    ttft_p99_s double precision,
    itl_p50_s double precision,
    itl_p99_s double precision,
    tpot_p50_s double precision,
    e2e_p99_s double precision,
    kv_cache_occupancy_peak double precision,
    gpu character varying(32) DEFAULT ''::character varying NOT NULL
);


--
-- Name: runs; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.runs (
    id character varying(32) NOT NULL,
    status character varying(16) NOT NULL,
    workload character varying(100) NOT NULL,
    model character varying(500) NOT NULL,
    engine character varying(32) NOT NULL,
    label character varying(200),
    schedule character varying(100),
    spec jsonb NOT NULL,
    summary jsonb,
    run_metadata jsonb,
    hardware jsonb,
    energy_per_token_j double precision,
    error text,
    created_at timestamp with time zone NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    timeline jsonb,
    error_stage character varying(32),
    node character varying(253),
    pod character varying(253),
    parts jsonb,
    valid boolean,
    capacity_requests_per_s double precision,
    matrix_id character varying(32)
);


--
-- Name: schedules; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.schedules (
    name character varying(100) NOT NULL,
    spec jsonb NOT NULL,
    interval_s double precision NOT NULL,
    enabled boolean NOT NULL,
    created_at timestamp with time zone NOT NULL
);


--
-- Name: timings; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.timings (
    run_id character varying(32) NOT NULL,
    stage_index integer NOT NULL,
    series character varying(32) NOT NULL,
    index integer NOT NULL,
    warmup boolean NOT NULL,
    seconds double precision NOT NULL
);


--
-- Data for Name: alembic_version; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.alembic_version (version_num) FROM stdin;
0005
\.


--
-- Data for Name: baselines; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.baselines (workload, run_id, set_at) FROM stdin;
fixture	1d999ab4422b447b9e8e37eadef152e2	2026-11-25 18:51:55.083099+00
\.


--
-- Data for Name: matrices; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.matrices (id, status, workload, document, variants, runs, baseline, comparison, error, node, created_at, started_at, finished_at) FROM stdin;
cbd420460f034e639ba24ae59d5a7f94	succeeded	fixture-matrix	{"name": "fixture-matrix", "label": "v1", "matrix": {"engine": ["transformers", "static"]}, "repeats": 1, "workload": {"stop": {"requests": 3}, "arrivals": {"profile": "concurrent", "concurrency": 2}, "output_tokens": {"dist": "fixed", "value": 4}, "prompt_tokens": {"dist": "fixed", "value": 8}}, "transformers": {"block_size": 16, "num_blocks": 64, "max_batch_tokens": 128}}	[{"spec": {"kind": "generate", "name": "fixture-matrix", "seed": 0, "dtype": "float32", "label": "v1", "model": "tiny", "device": "cpu", "engine": "transformers", "kernel": null, "openai": {"api": "completions", "model": null, "base_url": "http://127.0.0.1:8000/v1", "tokenizer": null, "extra_body": {}, "api_key_env": null, "metrics_url": null, "stream_options": {"include_usage": true}, "max_connections": null, "stall_timeout_s": 60.0, "client_processes": 1, "max_tokens_field": "max_tokens", "connect_timeout_s": 10.0, "request_timeout_s": null, "metrics_interval_s": 1.0}, "static": {"batch_size": 8}, "compile": "off", "workload": {"slo": null, "stop": {"requests": 3, "duration_s": null}, "prefix": null, "warmup": {"seconds": 0.0, "requests": 0}, "dataset": null, "arrivals": {"profile": "concurrent", "concurrency": 2}, "validity": {"max_errors": null, "min_requests": 0, "max_error_rate": null, "min_duration_s": 0.0, "oversaturation_s": null, "min_sent_rate_ratio": 0.95, "min_completion_ratio": 0.9, "max_dispatch_lag_p99_s": 0.001}, "ignore_eos": true, "conversation": null, "output_tokens": {"dist": "fixed", "value": 4}, "prompt_tokens": {"dist": "fixed", "value": 8}}, "placement": "one", "train_step": {"mode": "forward_backward", "steps": 10, "autocast": null, "batch_size": 4, "peak_tflops": null, "warmup_steps": 5, "warmup_study": null, "context_length": 512}, "quantization": "none", "transformers": {"block_size": 16, "num_blocks": 64, "cpu_threads": null, "compile_level": null, "use_cuda_graph": null, "library_defaults": false, "max_batch_tokens": 128, "use_async_batching": null, "max_requests_per_batch": null}, "tensor_parallel": 1, "trust_remote_code": false, "attn_implementation": null}, "index": 0, "label": "engine=transformers", "values": {"engine": "transformers"}}, {"spec": {"kind": "generate", "name": "fixture-matrix", "seed": 0, "dtype": "float32", "label": "v1", "model": "tiny", "device": "cpu", "engine": "static", "kernel": null, "openai": {"api": "completions", "model": null, "base_url": "http://127.0.0.1:8000/v1", "tokenizer": null, "extra_body": {}, "api_key_env": null, "metrics_url": null, "stream_options": {"include_usage": true}, "max_connections": null, "stall_timeout_s": 60.0, "client_processes": 1, "max_tokens_field": "max_tokens", "connect_timeout_s": 10.0, "request_timeout_s": null, "metrics_interval_s": 1.0}, "static": {"batch_size": 8}, "compile": "off", "workload": {"slo": null, "stop": {"requests": 3, "duration_s": null}, "prefix": null, "warmup": {"seconds": 0.0, "requests": 0}, "dataset": null, "arrivals": {"profile": "concurrent", "concurrency": 2}, "validity": {"max_errors": null, "min_requests": 0, "max_error_rate": null, "min_duration_s": 0.0, "oversaturation_s": null, "min_sent_rate_ratio": 0.95, "min_completion_ratio": 0.9, "max_dispatch_lag_p99_s": 0.001}, "ignore_eos": true, "conversation": null, "output_tokens": {"dist": "fixed", "value": 4}, "prompt_tokens": {"dist": "fixed", "value": 8}}, "placement": "one", "train_step": {"mode": "forward_backward", "steps": 10, "autocast": null, "batch_size": 4, "peak_tflops": null, "warmup_steps": 5, "warmup_study": null, "context_length": 512}, "quantization": "none", "transformers": {"block_size": 16, "num_blocks": 64, "cpu_threads": null, "compile_level": null, "use_cuda_graph": null, "library_defaults": false, "max_batch_tokens": 128, "use_async_batching": null, "max_requests_per_batch": null}, "tensor_parallel": 1, "trust_remote_code": false, "attn_implementation": null}, "index": 1, "label": "engine=static", "values": {"engine": "static"}}]	[{"round": 0, "run_id": "8f2787489d4549c9b3cd884b23629a97", "variant": 0}, {"round": 0, "run_id": "beadf97081b043f4b3598f4374ae7d4d", "variant": 1}]	0	{"baseline": 0, "variants": [{"index": 0, "label": "engine=transformers", "stack": {"compile": "off", "quantize_s": null, "quantization": "none", "quantized_layers": 0, "attn_implementation": "paged|sdpa", "quantization_method": null}, "tokens": null, "values": {"engine": "transformers"}, "invalid": [], "metrics": [], "run_ids": ["8f2787489d4549c9b3cd884b23629a97"], "baseline": true, "statuses": ["succeeded"], "itl_p50_s": 0.0018536560000939062, "tpot_p50_s": 0.00194397366673608, "ttft_p50_s": 0.0054833479998706025, "model_load_s": 0.010686292000173125, "weight_bytes": 558400, "oversaturated": [], "peak_memory_bytes": null, "output_tokens_per_s": 625.5403756730082}, {"index": 1, "label": "engine=static", "stack": {"compile": "off", "quantize_s": null, "quantization": "none", "quantized_layers": 0, "attn_implementation": "sdpa", "quantization_method": null}, "tokens": {"ratio": 1.0, "tokens": 12, "requests": 3, "identical_tokens": 12, "identical_requests": 3}, "values": {"engine": "static"}, "invalid": [], "metrics": [{"a": 0.0054833479998706025, "b": 0.01272943200001464, "ci_low": null, "metric": "ttft_s.p50", "reason": "too few samples: 3 and 3, at least 20 per side needed", "ci_high": null, "verdict": "inconclusive", "samples_a": 3, "samples_b": 3, "relative_change": 1.3214707511387263}, {"a": 0.005490757600091456, "b": 0.01272943200001464, "ci_low": null, "metric": "ttft_s.p90", "reason": "too few samples: 3 and 3, at least 100 per side needed", "ci_high": null, "verdict": "inconclusive", "samples_a": 3, "samples_b": 3, "relative_change": 1.3183380012628154}, {"a": 0.005492424760141148, "b": 0.01272943200001464, "ci_low": null, "metric": "ttft_s.p99", "reason": "too few samples: 3 and 3, at least 1000 per side needed", "ci_high": null, "verdict": "inconclusive", "samples_a": 3, "samples_b": 3, "relative_change": 1.317634297404105}, {"a": 0.0018536560000939062, "b": 0.0015567910004392616, "ci_low": null, "metric": "itl_s.p50", "reason": "too few samples: 9 and 9, at least 20 per side needed", "ci_high": null, "verdict": "inconclusive", "samples_a": 9, "samples_b": 9, "relative_change": -0.1601510742228361}, {"a": 0.0021820467996803926, "b": 0.010846565000065311, "ci_low": null, "metric": "itl_s.p90", "reason": "too few samples: 9 and 9, at least 100 per side needed", "ci_high": null, "verdict": "inconclusive", "samples_a": 9, "samples_b": 9, "relative_change": 3.970821433185586}, {"a": 0.0021869744799550973, "b": 0.010846565000065311, "ci_low": null, "metric": "itl_s.p99", "reason": "too few samples: 9 and 9, at least 1000 per side needed", "ci_high": null, "verdict": "inconclusive", "samples_a": 9, "samples_b": 9, "relative_change": 3.959621202478783}, {"a": 0.00194397366673608, "b": 0.007101897333389691, "ci_low": null, "metric": "tpot_s.p50", "reason": "too few samples: 3 and 3, at least 20 per side needed", "ci_high": null, "verdict": "inconclusive", "samples_a": 3, "samples_b": 3, "relative_change": 2.6532888561776318}, {"a": 0.001953325666545425, "b": 0.007101897333389691, "ci_low": null, "metric": "tpot_s.p90", "reason": "too few samples: 3 and 3, at least 100 per side needed", "ci_high": null, "verdict": "inconclusive", "samples_a": 3, "samples_b": 3, "relative_change": 2.635797888198453}, {"a": 0.001955429866502527, "b": 0.007101897333389691, "ci_low": null, "metric": "tpot_s.p99", "reason": "too few samples: 3 and 3, at least 1000 per side needed", "ci_high": null, "verdict": "inconclusive", "samples_a": 3, "samples_b": 3, "relative_change": 2.6318854769729545}, {"a": 0.011315269000078843, "b": 0.034035124000183714, "ci_low": null, "metric": "e2e_s.p50", "reason": "too few samples: 3 and 3, at least 20 per side needed", "ci_high": null, "verdict": "inconclusive", "samples_a": 3, "samples_b": 3, "relative_change": 2.0078934932918133}, {"a": 0.01135073459972773, "b": 0.034035124000183714, "ci_low": null, "metric": "e2e_s.p90", "reason": "too few samples: 3 and 3, at least 100 per side needed", "ci_high": null, "verdict": "inconclusive", "samples_a": 3, "samples_b": 3, "relative_change": 1.998495269284167}, {"a": 0.01135871435964873, "b": 0.034035124000183714, "ci_low": null, "metric": "e2e_s.p99", "reason": "too few samples: 3 and 3, at least 1000 per side needed", "ci_high": null, "verdict": "inconclusive", "samples_a": 3, "samples_b": 3, "relative_change": 1.9963887569082472}, {"a": 625.5403756730082, "b": 291.1638186648293, "ci_low": null, "metric": "output_tokens_per_s", "reason": "too few samples: 1 and 1, at least 2 per side needed", "ci_high": null, "verdict": "inconclusive", "samples_a": 1, "samples_b": 1, "relative_change": -0.5345403270707009}, {"a": null, "b": null, "ci_low": null, "metric": "energy_per_token_j", "reason": "too few samples: 0 and 0, at least 2 per side needed", "ci_high": null, "verdict": "inconclusive", "samples_a": 0, "samples_b": 0, "relative_change": null}, {"a": null, "b": null, "ci_low": null, "metric": "peak_memory_bytes", "reason": "too few samples: 0 and 0, at least 2 per side needed", "ci_high": null, "verdict": "inconclusive", "samples_a": 0, "samples_b": 0, "relative_change": null}, {"a": 558400.0, "b": 558400.0, "ci_low": 0.0, "metric": "weight_bytes", "reason": null, "ci_high": 0.0, "verdict": "no significant change", "samples_a": 1, "samples_b": 1, "relative_change": 0.0}], "run_ids": ["beadf97081b043f4b3598f4374ae7d4d"], "baseline": false, "statuses": ["succeeded"], "itl_p50_s": 0.0015567910004392616, "tpot_p50_s": 0.007101897333389691, "ttft_p50_s": 0.01272943200001464, "model_load_s": null, "weight_bytes": 558400, "oversaturated": [], "peak_memory_bytes": null, "output_tokens_per_s": 291.1638186648293}], "threshold": 0.05, "confidence": 0.95}	\N	vm	2026-11-25 18:51:37.983795+00	2026-11-25 18:51:46.454458+00	2026-11-25 18:51:52.291824+00
\.


--
-- Data for Name: requests; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.requests (run_id, stage_index, stage, index, request_id, warmup, prompt_tokens, max_new_tokens, output_tokens, scheduled_s, submitted_s, admitted_s, finished_s, dispatch_lag_s, queue_s, ttft_s, tpot_s, e2e_s, error, trace_id, arrival_s, arrival_tokens, gpu, token_ids) FROM stdin;
1d999ab4422b447b9e8e37eadef152e2	0	concurrent=2	0	s0-r0	f	8	4	4	0	0.0002412610001556459	0.001696813000307884	0.0316936760000317	0.0002412610001556459	0.001696813000307884	0.014625853999859828	0.005689274000057291	0.0316936760000317	\N	\N	[0.014625853999859828, 0.02701733300000342, 0.02918317900002876, 0.0316936760000317]	[1, 1, 1, 1]		[135, 511, 270, 481]
1d999ab4422b447b9e8e37eadef152e2	0	concurrent=2	1	s0-r1	f	8	4	4	0	0.000356704000296304	0.0017230490002475563	0.03173452600003657	0.000356704000296304	0.0017230490002475563	0.014642578000348294	0.005697315999896091	0.03173452600003657	\N	\N	[0.014642578000348294, 0.027022432999729062, 0.02919158900022012, 0.03173452600003657]	[1, 1, 1, 1]		[449, 452, 45, 314]
1d999ab4422b447b9e8e37eadef152e2	0	concurrent=2	2	s0-r2	f	8	4	4	0.0316936760000317	0.03205733800041344	0.03222432700022182	0.04982211000060488	0.000363662000381737	0.0005306510001901188	0.0030733599996892735	0.0050183580002946355	0.01812843400057318	\N	\N	[0.034767035999720974, 0.03705279000041628, 0.041328041999804555, 0.04982211000060488]	[1, 1, 1, 1]		[64, 340, 75, 325]
45c14e54f7a549b0a1c000e660c3a5eb	0	concurrent=2	0	s0-r0	f	8	4	4	0	0.00020419799966475694	0.001372904000163544	0.03117152199956763	0.00020419799966475694	0.001372904000163544	0.015321527999731188	0.005283331333278814	0.03117152199956763	\N	\N	[0.015321527999731188, 0.019562190999749873, 0.025388414000190096, 0.03117152199956763]	[1, 1, 1, 1]		[135, 511, 270, 481]
45c14e54f7a549b0a1c000e660c3a5eb	0	concurrent=2	1	s0-r1	f	8	4	4	0	0.0002565610002420726	0.001372904000163544	0.03117152199956763	0.0002565610002420726	0.001372904000163544	0.015321527999731188	0.005283331333278814	0.03117152199956763	\N	\N	[0.015321527999731188, 0.019562190999749873, 0.025388414000190096, 0.03117152199956763]	[1, 1, 1, 1]		[449, 452, 45, 314]
45c14e54f7a549b0a1c000e660c3a5eb	0	concurrent=2	2	s0-r2	f	8	4	4	0.03117152199956763	0.03125933899991651	0.034201712000140105	0.05203467499995895	8.781700034887763e-05	0.0030301900005724747	0.007993561000148475	0.004289864000080949	0.02086315300039132	\N	\N	[0.039165082999716105, 0.047085225000046194, 0.050775859000168566, 0.05203467499995895]	[1, 1, 1, 1]		[64, 340, 75, 325]
e2f4075f2cb04f86a67fc4a2c1eb036c	0	concurrent=2	0	s0-r0	f	2	4	4	0	0.006602174999898125	0.02200965899919538	0.06096510399947874	0.006602174999898125	0.02200965899919538	0.024429078999673948	0.012164662666691584	0.0609230669997487	\N	\N	[0.024429078999673948, 0.04074497700003121, 0.048740451999947254, 0.0609230669997487]	[1, 1, 1, 1]		null
e2f4075f2cb04f86a67fc4a2c1eb036c	0	concurrent=2	1	s0-r1	f	2	4	4	0	0.006670090999250533	0.02206842499981576	0.06106685499980813	0.006670090999250533	0.02206842499981576	0.02450681599930249	0.012186679666835213	0.06106685499980813	\N	\N	[0.02450681599930249, 0.04083242899923789, 0.04892737899990607, 0.06106685499980813]	[1, 1, 1, 1]		null
e2f4075f2cb04f86a67fc4a2c1eb036c	0	concurrent=2	2	s0-r2	f	2	4	4	0.06096510399947874	0.06179012799930206	0.06299992099957308	0.07227355999930296	0.0008250239998233155	0.0020348170000943355	0.004331828000431415	0.002289497999906113	0.011200322000149754	\N	\N	[0.06529693199991016, 0.06760935700003756, 0.06989081699975941, 0.0721654259996285]	[1, 1, 1, 1]		null
8f2787489d4549c9b3cd884b23629a97	0	concurrent=2	0	s0-r0	f	8	4	4	0	0.00020019299972773297	0.00039516099968750495	0.011315269000078843	0.00020019299972773297	0.00039516099968750495	0.0054833479998706025	0.00194397366673608	0.011315269000078843	\N	\N	[0.0054833479998706025, 0.007670869999856222, 0.009524525999950129, 0.011315269000078843]	[1, 1, 1, 1]		[135, 511, 270, 481]
8f2787489d4549c9b3cd884b23629a97	0	concurrent=2	1	s0-r1	f	8	4	4	0	0.0002824479997798335	0.0004098370000065188	0.011359600999639952	0.0002824479997798335	0.0004098370000065188	0.005492610000146669	0.001955663666497761	0.011359600999639952	\N	\N	[0.005492610000146669, 0.007673287999750755, 0.00952729900018312, 0.011359600999639952]	[1, 1, 1, 1]		[449, 452, 45, 314]
8f2787489d4549c9b3cd884b23629a97	0	concurrent=2	2	s0-r2	f	8	4	4	0.011315269000078843	0.011675818999719922	0.011818093999863777	0.019183413999598997	0.0003605499996410799	0.0005028249997849343	0.0023922099999253987	0.0018253116665315854	0.007868144999520155	\N	\N	[0.013707479000004241, 0.015452378000190947, 0.017226339999979245, 0.019183413999598997]	[1, 1, 1, 1]		[64, 340, 75, 325]
beadf97081b043f4b3598f4374ae7d4d	0	concurrent=2	0	s0-r0	f	8	4	4	0	0.006070524999813642	0.006942297000023245	0.034035124000183714	0.006070524999813642	0.006942297000023245	0.01272943200001464	0.007101897333389691	0.034035124000183714	\N	\N	[0.01272943200001464, 0.02163176799967914, 0.023188559000118403, 0.034035124000183714]	[1, 1, 1, 1]		[135, 511, 270, 481]
beadf97081b043f4b3598f4374ae7d4d	0	concurrent=2	1	s0-r1	f	8	4	4	0	0.006161524999697576	0.006942297000023245	0.034035124000183714	0.006161524999697576	0.006942297000023245	0.01272943200001464	0.007101897333389691	0.034035124000183714	\N	\N	[0.01272943200001464, 0.02163176799967914, 0.023188559000118403, 0.034035124000183714]	[1, 1, 1, 1]		[449, 452, 45, 314]
beadf97081b043f4b3598f4374ae7d4d	0	concurrent=2	2	s0-r2	f	8	4	4	0.034035124000183714	0.03410662999976921	0.034396074999676785	0.04121391199987556	7.150599958549719e-05	0.0003609509994930704	0.0031786629997441196	0.0013333749999825766	0.007178787999691849	\N	\N	[0.037213786999927834, 0.03856740900027944, 0.03991373799999565, 0.04121391199987556]	[1, 1, 1, 1]		[64, 340, 75, 325]
ae504380de0f4ca5a4653e2830f3381b	0	concurrent=2	0	s0-r0	f	8	4	4	0	0.002934696000011172	0.003187390000675805	0.01231948700024077	0.002934696000011172	0.003187390000675805	0.007100212000295869	0.0017397583333149669	0.01231948700024077	\N	\N	[0.007100212000295869, 0.009047305999956734, 0.01060694500029058, 0.01231948700024077]	[1, 1, 1, 1]		[135, 511, 270, 481]
ae504380de0f4ca5a4653e2830f3381b	0	concurrent=2	1	s0-r1	f	8	4	4	0	0.003032474000065122	0.0032025900000007823	0.012430654000127106	0.003032474000065122	0.0032025900000007823	0.00710457600052905	0.0017753593331993518	0.012430654000127106	\N	\N	[0.00710457600052905, 0.009050192000358948, 0.010609552999994776, 0.012430654000127106]	[1, 1, 1, 1]		[449, 452, 45, 314]
ae504380de0f4ca5a4653e2830f3381b	0	concurrent=2	2	s0-r2	f	8	4	4	0.01231948700024077	0.012574938999932783	0.012684999000157404	0.019379880000087724	0.0002554519996920135	0.0003655119999166345	0.0020687289998022607	0.0016638880000148977	0.007060392999846954	\N	\N	[0.01438821600004303, 0.01626296500035096, 0.01775036600065505, 0.019379880000087724]	[1, 1, 1, 1]		[64, 340, 75, 325]
\.


--
-- Data for Name: run_stages; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.run_stages (run_id, stage_index, stage, status, requests, errors, duration_s, output_tokens_per_s, requests_per_s, ttft_p50_s, ttft_p99_s, itl_p50_s, itl_p99_s, tpot_p50_s, e2e_p99_s, kv_cache_occupancy_peak, gpu) FROM stdin;
1d999ab4422b447b9e8e37eadef152e2	0	concurrent=2	succeeded	3	0	0.04982211000060488	240.8569207497296	60.2142301874324	0.014625853999859828	0.014642243520338525	0.0025429369998164475	0.012390549080082565	0.005689274000057291	0.03173370900003647	0	
45c14e54f7a549b0a1c000e660c3a5eb	0	concurrent=2	succeeded	3	0	0.05203467499995895	230.61545017835638	57.653862544589096	0.015321527999731188	0.015321527999731188	0.005783107999377535	0.007752628480338899	0.005283331333278814	0.03117152199956763	\N	
e2f4075f2cb04f86a67fc4a2c1eb036c	0	concurrent=2	succeeded	3	0	0.0721654259996285	166.28461391001522	41.571153477503806	0.024429078999673948	0.024505261259309918	0.008094950000668177	0.01632483579996915	0.012164662666691584	0.06106397923980694	\N	
8f2787489d4549c9b3cd884b23629a97	0	concurrent=2	succeeded	3	0	0.019183413999598997	625.5403756730082	156.38509391825204	0.0054833479998706025	0.005492424760141148	0.0018536560000939062	0.0021869744799550973	0.00194397366673608	0.01135871435964873	0	
beadf97081b043f4b3598f4374ae7d4d	0	concurrent=2	succeeded	3	0	0.04121391199987556	291.1638186648293	72.79095466620733	0.01272943200001464	0.01272943200001464	0.0015567910004392616	0.010846565000065311	0.007101897333389691	0.034035124000183714	\N	
ae504380de0f4ca5a4653e2830f3381b	0	concurrent=2	succeeded	3	0	0.019379880000087724	619.1988804856212	154.7997201214053	0.007100212000295869	0.007104488720524387	0.00171254199995019	0.0019469757596743875	0.0017397583333149669	0.012428430660129379	0	
\.


--
-- Data for Name: runs; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.runs (id, status, workload, model, engine, label, schedule, spec, summary, run_metadata, hardware, energy_per_token_j, error, created_at, started_at, finished_at, timeline, error_stage, node, pod, parts, valid, capacity_requests_per_s, matrix_id) FROM stdin;
1d999ab4422b447b9e8e37eadef152e2	succeeded	fixture	tiny	transformers	v1	\N	{"kind": "generate", "name": "fixture", "seed": 0, "dtype": "float32", "label": "v1", "model": "tiny", "device": "cpu", "engine": "transformers", "kernel": null, "openai": {"api": "completions", "model": null, "base_url": "http://127.0.0.1:8000/v1", "tokenizer": null, "extra_body": {}, "api_key_env": null, "metrics_url": null, "stream_options": {"include_usage": true}, "max_connections": null, "stall_timeout_s": 60.0, "client_processes": 1, "max_tokens_field": "max_tokens", "connect_timeout_s": 10.0, "request_timeout_s": null, "metrics_interval_s": 1.0}, "static": {"batch_size": 8}, "compile": "off", "workload": {"slo": null, "stop": {"requests": 3, "duration_s": null}, "prefix": null, "warmup": {"seconds": 0.0, "requests": 0}, "dataset": null, "arrivals": {"profile": "concurrent", "concurrency": 2}, "validity": {"max_errors": null, "min_requests": 0, "max_error_rate": null, "min_duration_s": 0.0, "oversaturation_s": null, "min_sent_rate_ratio": 0.95, "min_completion_ratio": 0.9, "max_dispatch_lag_p99_s": 0.001}, "ignore_eos": true, "conversation": null, "output_tokens": {"dist": "fixed", "value": 4}, "prompt_tokens": {"dist": "fixed", "value": 8}}, "placement": "one", "train_step": {"mode": "forward_backward", "steps": 10, "autocast": null, "batch_size": 4, "peak_tflops": null, "warmup_steps": 5, "warmup_study": null, "context_length": 512}, "quantization": "none", "transformers": {"block_size": 16, "num_blocks": 64, "cpu_threads": null, "compile_level": null, "use_cuda_graph": null, "library_defaults": false, "max_batch_tokens": 128, "use_async_batching": null, "max_requests_per_batch": null}, "tensor_parallel": 1, "trust_remote_code": false, "attn_implementation": null}	[{"e2e_s": {"max": 0.03173452600003657, "min": 0.01812843400057318, "p50": 0.0316936760000317, "p90": 0.031726356000035594, "p95": 0.03173044100003608, "p99": 0.03173370900003647, "std": 0.0064043665548873365, "mean": 0.02718554533354715, "count": 3}, "itl_s": {"max": 0.01239147900014359, "min": 0.00216584600002534, "p50": 0.0025429369998164475, "p90": 0.012382179799533332, "p95": 0.012386829399838461, "p99": 0.012390549080082565, "std": 0.004156709908360893, "mean": 0.0054683160000826726, "count": 9}, "stage": "concurrent=2", "valid": true, "errors": 0, "status": "succeeded", "tpot_s": {"max": 0.005697315999896091, "min": 0.0050183580002946355, "p50": 0.005689274000057291, "p90": 0.005695707599928331, "p95": 0.005696511799912211, "p99": 0.005697155159899315, "std": 0.0003181852915313027, "mean": 0.005468316000082673, "count": 3}, "ttft_s": {"max": 0.014642578000348294, "min": 0.0030733599996892735, "p50": 0.014625853999859828, "p90": 0.0146392332002506, "p95": 0.014640905600299448, "p99": 0.014642243520338525, "std": 0.005449844059572732, "mean": 0.010780597333299132, "count": 3}, "invalid": [], "queue_s": {"max": 0.0017230490002475563, "min": 0.0005306510001901188, "p50": 0.001696813000307884, "p90": 0.0017178018002596217, "p95": 0.001720425400253589, "p99": 0.0017225242802487628, "std": 0.0005560210955982474, "mean": 0.0013168376669151864, "count": 3}, "slo_met": null, "requests": 3, "duration_s": 0.04982211000060488, "slo_misses": [], "stop_reason": null, "output_tokens": 12, "prompt_tokens": 24, "dispatch_lag_s": {"max": 0.000363662000381737, "min": 0.0002412610001556459, "p50": 0.000356704000296304, "p90": 0.00036227040036465044, "p95": 0.0003629662003731937, "p99": 0.00036352284038002834, "std": 0.000056132289086696724, "mean": 0.00032054233361122897, "count": 3}, "requests_per_s": 60.2142301874324, "slo_attainment": null, "sent_rate_ratio": null, "warmup_requests": 0, "total_tokens_per_s": 722.5707622491888, "output_tokens_per_s": 240.8569207497296, "goodput_requests_per_s": null, "offered_requests_per_s": null, "kv_cache_occupancy_peak": 0.0, "completed_requests_per_s": null}]	{"host": "vm", "label": "v1", "model": "tiny", "device": "cpu", "run_id": "1d999ab4422b447b9e8e37eadef152e2", "compile": "off", "trace_id": null, "quantize_s": null, "started_at": "2026-11-25T18:51:37.514+00:00", "device_name": "x86_64", "finished_at": "2026-11-25T18:51:38.665+00:00", "cuda_version": null, "model_load_s": null, "quantization": "none", "weight_bytes": 558400, "torch_threads": 2, "torch_version": "2.13.0+cpu", "benchd_version": "0.1.0", "driver_version": null, "python_version": "3.11.7", "engine_settings": {"engine": "transformers", "cpu_threads": 2, "continuous_batching": {"seed": null, "block_size": 16, "num_blocks": 64, "safety_margin": null, "max_queue_size": 0, "scheduler_type": "fifo", "use_cuda_graph": [false, false], "return_logprobs": false, "max_batch_tokens": 128, "cpu_group_timeout": 300.0, "cpu_offload_space": 0.0, "max_cached_graphs": null, "max_memory_percent": 0.9, "use_async_batching": false, "allow_block_sharing": true, "decode_compile_config": null, "default_compile_level": 0, "varlen_compile_config": null, "max_blocks_per_request": 0, "max_requests_per_batch": 128, "per_request_processors": false, "q_padding_interval_size": 64, "kv_padding_interval_size": 16384, "disable_nccl_graph_mixing": true, "drop_unsupported_processors": true, "use_default_compile_configs": null, "cpu_offload_space_safety_threshold": 0.8}}, "quantized_layers": 0, "peak_memory_bytes": null, "attn_implementation": "paged|sdpa", "peak_reserved_bytes": null, "quantization_method": null, "transformers_version": "5.17.0"}	{"gpus": [], "samples": 1, "window_s": 0.04982211000060488, "energy_joules": null, "power_mean_watts": null, "throttled_fraction": null, "gpu_utilization_max": null, "cpu_utilization_mean": 1.0, "gpu_utilization_mean": null, "gpu_memory_peak_bytes": null, "energy_per_output_token_joules": null}	\N	\N	2026-11-25 18:51:37.438297+00	2026-11-25 18:51:37.462287+00	2026-11-25 18:51:38.668972+00	{"load": {"t": [1.1247749470003328], "running": [0], "waiting": [0], "kv_usage": [0.0], "output_tokens_per_s": [0.0]}, "stages": [{"end_s": 1.1744183580003664, "index": 0, "label": "concurrent=2", "start_s": 1.1245962479997615}], "hardware": {"t": [-0.08244776599985926, -0.010858720000214817, 0.9894934249996368, 1.185436695000135], "gpus": {}, "cpu_utilization": [1.0, 1.0, 1.0, 1.0]}}	\N	vm	\N	null	t	\N	\N
45c14e54f7a549b0a1c000e660c3a5eb	succeeded	fixture-static	tiny	static	\N	\N	{"kind": "generate", "name": "fixture-static", "seed": 0, "dtype": "float32", "label": null, "model": "tiny", "device": "cpu", "engine": "static", "kernel": null, "openai": {"api": "completions", "model": null, "base_url": "http://127.0.0.1:8000/v1", "tokenizer": null, "extra_body": {}, "api_key_env": null, "metrics_url": null, "stream_options": {"include_usage": true}, "max_connections": null, "stall_timeout_s": 60.0, "client_processes": 1, "max_tokens_field": "max_tokens", "connect_timeout_s": 10.0, "request_timeout_s": null, "metrics_interval_s": 1.0}, "static": {"batch_size": 2}, "compile": "off", "workload": {"slo": null, "stop": {"requests": 3, "duration_s": null}, "prefix": null, "warmup": {"seconds": 0.0, "requests": 0}, "dataset": null, "arrivals": {"profile": "concurrent", "concurrency": 2}, "validity": {"max_errors": null, "min_requests": 0, "max_error_rate": null, "min_duration_s": 0.0, "oversaturation_s": null, "min_sent_rate_ratio": 0.95, "min_completion_ratio": 0.9, "max_dispatch_lag_p99_s": 0.001}, "ignore_eos": true, "conversation": null, "output_tokens": {"dist": "fixed", "value": 4}, "prompt_tokens": {"dist": "fixed", "value": 8}}, "placement": "one", "train_step": {"mode": "forward_backward", "steps": 10, "autocast": null, "batch_size": 4, "peak_tflops": null, "warmup_steps": 5, "warmup_study": null, "context_length": 512}, "quantization": "none", "transformers": {"block_size": 16, "num_blocks": 64, "cpu_threads": null, "compile_level": null, "use_cuda_graph": null, "library_defaults": false, "max_batch_tokens": 128, "use_async_batching": null, "max_requests_per_batch": null}, "tensor_parallel": 1, "trust_remote_code": false, "attn_implementation": null}	[{"e2e_s": {"max": 0.03117152199956763, "min": 0.02086315300039132, "p50": 0.03117152199956763, "p90": 0.03117152199956763, "p95": 0.03117152199956763, "p99": 0.03117152199956763, "std": 0.004859411748193835, "mean": 0.027735398999842193, "count": 3}, "itl_s": {"max": 0.007920142000330088, "min": 0.0012588159997903858, "p50": 0.005783107999377535, "p90": 0.006245006800418196, "p95": 0.007082574400374141, "p99": 0.007752628480338899, "std": 0.001762653690041058, "mean": 0.004952175555546192, "count": 9}, "stage": "concurrent=2", "valid": true, "errors": 0, "status": "succeeded", "tpot_s": {"max": 0.005283331333278814, "min": 0.004289864000080949, "p50": 0.005283331333278814, "p90": 0.005283331333278814, "p95": 0.005283331333278814, "p99": 0.005283331333278814, "std": 0.0004683249921276836, "mean": 0.004952175555546192, "count": 3}, "ttft_s": {"max": 0.015321527999731188, "min": 0.007993561000148475, "p50": 0.015321527999731188, "p90": 0.015321527999731188, "p95": 0.015321527999731188, "p99": 0.015321527999731188, "std": 0.0034544367718107832, "mean": 0.012878872333203617, "count": 3}, "invalid": [], "queue_s": {"max": 0.0030301900005724747, "min": 0.001372904000163544, "p50": 0.001372904000163544, "p90": 0.0026987328004906886, "p95": 0.0028644614005315814, "p99": 0.002997044280564296, "std": 0.0007812521128364575, "mean": 0.001925332666966521, "count": 3}, "slo_met": null, "requests": 3, "duration_s": 0.05203467499995895, "slo_misses": [], "stop_reason": null, "output_tokens": 12, "prompt_tokens": 24, "dispatch_lag_s": {"max": 0.0002565610002420726, "min": 0.00008781700034887763, "p50": 0.00020419799966475694, "p90": 0.00024608840012660946, "p95": 0.00025132470018434104, "p99": 0.0002555137402305263, "std": 0.00007052261916984685, "mean": 0.0001828586667519024, "count": 3}, "requests_per_s": 57.653862544589096, "slo_attainment": null, "sent_rate_ratio": null, "warmup_requests": 0, "total_tokens_per_s": 691.8463505350692, "output_tokens_per_s": 230.61545017835638, "goodput_requests_per_s": null, "offered_requests_per_s": null, "kv_cache_occupancy_peak": null, "completed_requests_per_s": null}]	{"host": "vm", "label": null, "model": "tiny", "device": "cpu", "run_id": "45c14e54f7a549b0a1c000e660c3a5eb", "compile": "off", "trace_id": null, "quantize_s": null, "started_at": "2026-11-25T18:51:40.262+00:00", "device_name": "x86_64", "finished_at": "2026-11-25T18:51:41.221+00:00", "cuda_version": null, "model_load_s": null, "quantization": "none", "weight_bytes": 558400, "torch_threads": 2, "torch_version": "2.13.0+cpu", "benchd_version": "0.1.0", "driver_version": null, "python_version": "3.11.7", "engine_settings": {"engine": "static", "compile": "off", "batch_size": 2}, "quantized_layers": 0, "peak_memory_bytes": null, "attn_implementation": "sdpa", "peak_reserved_bytes": null, "quantization_method": null, "transformers_version": "5.17.0"}	{"gpus": [], "samples": 1, "window_s": 0.05203467499995895, "energy_joules": null, "power_mean_watts": null, "throttled_fraction": null, "gpu_utilization_max": null, "cpu_utilization_mean": 1.0, "gpu_utilization_mean": null, "gpu_memory_peak_bytes": null, "energy_per_output_token_joules": null}	\N	\N	2026-11-25 18:51:37.471711+00	2026-11-25 18:51:38.951495+00	2026-11-25 18:51:41.263111+00	{"load": {"t": [2.1935721059999196], "running": [0], "waiting": [0], "kv_usage": [null], "output_tokens_per_s": [0.0]}, "stages": [{"end_s": 2.2454518610002197, "index": 0, "label": "concurrent=2", "start_s": 2.1934171860002607}], "hardware": {"t": [-0.3084593699995821, -0.01873039299971424, 0.9814610150006047, 1.9816333369999484, 2.2797805010004595], "gpus": {}, "cpu_utilization": [1.0, 1.0, 1.0, 1.0, 1.0]}}	\N	vm	\N	null	t	\N	\N
8f2787489d4549c9b3cd884b23629a97	succeeded	fixture-matrix	tiny	transformers	v1	\N	{"kind": "generate", "name": "fixture-matrix", "seed": 0, "dtype": "float32", "label": "v1", "model": "tiny", "device": "cpu", "engine": "transformers", "kernel": null, "openai": {"api": "completions", "model": null, "base_url": "http://127.0.0.1:8000/v1", "tokenizer": null, "extra_body": {}, "api_key_env": null, "metrics_url": null, "stream_options": {"include_usage": true}, "max_connections": null, "stall_timeout_s": 60.0, "client_processes": 1, "max_tokens_field": "max_tokens", "connect_timeout_s": 10.0, "request_timeout_s": null, "metrics_interval_s": 1.0}, "static": {"batch_size": 8}, "compile": "off", "workload": {"slo": null, "stop": {"requests": 3, "duration_s": null}, "prefix": null, "warmup": {"seconds": 0.0, "requests": 0}, "dataset": null, "arrivals": {"profile": "concurrent", "concurrency": 2}, "validity": {"max_errors": null, "min_requests": 0, "max_error_rate": null, "min_duration_s": 0.0, "oversaturation_s": null, "min_sent_rate_ratio": 0.95, "min_completion_ratio": 0.9, "max_dispatch_lag_p99_s": 0.001}, "ignore_eos": true, "conversation": null, "output_tokens": {"dist": "fixed", "value": 4}, "prompt_tokens": {"dist": "fixed", "value": 8}}, "placement": "one", "train_step": {"mode": "forward_backward", "steps": 10, "autocast": null, "batch_size": 4, "peak_tflops": null, "warmup_steps": 5, "warmup_study": null, "context_length": 512}, "quantization": "none", "transformers": {"block_size": 16, "num_blocks": 64, "cpu_threads": null, "compile_level": null, "use_cuda_graph": null, "library_defaults": false, "max_batch_tokens": 128, "use_async_batching": null, "max_requests_per_batch": null}, "tensor_parallel": 1, "trust_remote_code": false, "attn_implementation": null}	[{"e2e_s": {"max": 0.011359600999639952, "min": 0.007868144999520155, "p50": 0.011315269000078843, "p90": 0.01135073459972773, "p95": 0.011355167799683841, "p99": 0.01135871435964873, "std": 0.0016355391296716997, "mean": 0.010181004999746316, "count": 3}, "itl_s": {"max": 0.00218752199998562, "min": 0.001744899000186706, "p50": 0.0018536560000939062, "p90": 0.0021820467996803926, "p95": 0.0021847843998330065, "p99": 0.0021869744799550973, "std": 0.00015804668513103465, "mean": 0.001908316333255142, "count": 9}, "stage": "concurrent=2", "valid": true, "errors": 0, "status": "succeeded", "tpot_s": {"max": 0.001955663666497761, "min": 0.0018253116665315854, "p50": 0.00194397366673608, "p90": 0.001953325666545425, "p95": 0.001954494666521593, "p99": 0.001955429866502527, "std": 0.00005888686920428339, "mean": 0.0019083163332551422, "count": 3}, "ttft_s": {"max": 0.005492610000146669, "min": 0.0023922099999253987, "p50": 0.0054833479998706025, "p90": 0.005490757600091456, "p95": 0.005491683800119063, "p99": 0.005492424760141148, "std": 0.0014593644004888035, "mean": 0.00445605599998089, "count": 3}, "invalid": [], "queue_s": {"max": 0.0005028249997849343, "min": 0.00039516099968750495, "p50": 0.0004098370000065188, "p90": 0.00048422739982925125, "p95": 0.0004935261998070927, "p99": 0.000500965239789366, "std": 0.00004767213255973158, "mean": 0.00043594099982631934, "count": 3}, "slo_met": null, "requests": 3, "duration_s": 0.019183413999598997, "slo_misses": [], "stop_reason": null, "output_tokens": 12, "prompt_tokens": 24, "dispatch_lag_s": {"max": 0.0003605499996410799, "min": 0.00020019299972773297, "p50": 0.0002824479997798335, "p90": 0.00034492959966883065, "p95": 0.0003527397996549553, "p99": 0.000358987959643855, "std": 0.0000654727889509208, "mean": 0.0002810636663828821, "count": 3}, "requests_per_s": 156.38509391825204, "slo_attainment": null, "sent_rate_ratio": null, "warmup_requests": 0, "total_tokens_per_s": 1876.6211270190245, "output_tokens_per_s": 625.5403756730082, "goodput_requests_per_s": null, "offered_requests_per_s": null, "kv_cache_occupancy_peak": 0.0, "completed_requests_per_s": null}]	{"host": "vm", "label": "v1", "model": "tiny", "device": "cpu", "run_id": "8f2787489d4549c9b3cd884b23629a97", "compile": "off", "trace_id": null, "quantize_s": null, "started_at": "2026-11-25T18:51:47.302+00:00", "device_name": "x86_64", "finished_at": "2026-11-25T18:51:48.222+00:00", "cuda_version": null, "model_load_s": 0.010686292000173125, "quantization": "none", "weight_bytes": 558400, "torch_threads": 2, "torch_version": "2.13.0+cpu", "benchd_version": "0.1.0", "driver_version": null, "python_version": "3.11.7", "engine_settings": {"engine": "transformers", "cpu_threads": 2, "continuous_batching": {"seed": null, "block_size": 16, "num_blocks": 64, "safety_margin": null, "max_queue_size": 0, "scheduler_type": "fifo", "use_cuda_graph": [false, false], "return_logprobs": false, "max_batch_tokens": 128, "cpu_group_timeout": 300.0, "cpu_offload_space": 0.0, "max_cached_graphs": null, "max_memory_percent": 0.9, "use_async_batching": false, "allow_block_sharing": true, "decode_compile_config": null, "default_compile_level": 0, "varlen_compile_config": null, "max_blocks_per_request": 0, "max_requests_per_batch": 128, "per_request_processors": false, "q_padding_interval_size": 64, "kv_padding_interval_size": 16384, "disable_nccl_graph_mixing": true, "drop_unsupported_processors": true, "use_default_compile_configs": null, "cpu_offload_space_safety_threshold": 0.8}}, "quantized_layers": 0, "peak_memory_bytes": null, "attn_implementation": "paged|sdpa", "peak_reserved_bytes": null, "quantization_method": null, "transformers_version": "5.17.0"}	{"gpus": [], "samples": 1, "window_s": 0.019183413999598997, "energy_joules": null, "power_mean_watts": null, "throttled_fraction": null, "gpu_utilization_max": null, "cpu_utilization_mean": 1.0, "gpu_utilization_mean": null, "gpu_memory_peak_bytes": null, "energy_per_output_token_joules": null}	\N	\N	2026-11-25 18:51:37.991092+00	2026-11-25 18:51:46.481684+00	2026-11-25 18:51:48.356571+00	{"load": {"t": [1.717151572000148], "running": [0], "waiting": [0], "kv_usage": [0.0], "output_tokens_per_s": [0.0]}, "stages": [{"end_s": 1.736191023000174, "index": 0, "label": "concurrent=2", "start_s": 1.717007609000575}], "hardware": {"t": [-0.10949682899990876, -0.0004626079999070498, 1.0053391360006572, 1.8697406760002195], "gpus": {}, "cpu_utilization": [1.0, 1.0, 1.0, 1.0]}}	\N	vm	\N	null	t	\N	cbd420460f034e639ba24ae59d5a7f94
ae504380de0f4ca5a4653e2830f3381b	succeeded	fixture	tiny	transformers	v1	nightly	{"kind": "generate", "name": "fixture", "seed": 0, "dtype": "float32", "label": "v1", "model": "tiny", "device": "cpu", "engine": "transformers", "kernel": null, "openai": {"api": "completions", "model": null, "base_url": "http://127.0.0.1:8000/v1", "tokenizer": null, "extra_body": {}, "api_key_env": null, "metrics_url": null, "stream_options": {"include_usage": true}, "max_connections": null, "stall_timeout_s": 60.0, "client_processes": 1, "max_tokens_field": "max_tokens", "connect_timeout_s": 10.0, "request_timeout_s": null, "metrics_interval_s": 1.0}, "static": {"batch_size": 8}, "compile": "off", "workload": {"slo": null, "stop": {"requests": 3, "duration_s": null}, "prefix": null, "warmup": {"seconds": 0.0, "requests": 0}, "dataset": null, "arrivals": {"profile": "concurrent", "concurrency": 2}, "validity": {"max_errors": null, "min_requests": 0, "max_error_rate": null, "min_duration_s": 0.0, "oversaturation_s": null, "min_sent_rate_ratio": 0.95, "min_completion_ratio": 0.9, "max_dispatch_lag_p99_s": 0.001}, "ignore_eos": true, "conversation": null, "output_tokens": {"dist": "fixed", "value": 4}, "prompt_tokens": {"dist": "fixed", "value": 8}}, "placement": "one", "train_step": {"mode": "forward_backward", "steps": 10, "autocast": null, "batch_size": 4, "peak_tflops": null, "warmup_steps": 5, "warmup_study": null, "context_length": 512}, "quantization": "none", "transformers": {"block_size": 16, "num_blocks": 64, "cpu_threads": null, "compile_level": null, "use_cuda_graph": null, "library_defaults": false, "max_batch_tokens": 128, "use_async_batching": null, "max_requests_per_batch": null}, "tensor_parallel": 1, "trust_remote_code": false, "attn_implementation": null}	[{"e2e_s": {"max": 0.012430654000127106, "min": 0.007060392999846954, "p50": 0.01231948700024077, "p90": 0.01240842060014984, "p95": 0.012419537300138473, "p99": 0.012428430660129379, "std": 0.0025057740214235852, "mean": 0.010603511333404944, "count": 3}, "itl_s": {"max": 0.001947093999660865, "min": 0.0014874010003040894, "p50": 0.00171254199995019, "p90": 0.0019459115997960907, "p95": 0.0019465027997284778, "p99": 0.0019469757596743875, "std": 0.00016671595451210294, "mean": 0.0017263352221764056, "count": 9}, "stage": "concurrent=2", "valid": true, "errors": 0, "status": "succeeded", "tpot_s": {"max": 0.0017753593331993518, "min": 0.0016638880000148977, "p50": 0.0017397583333149669, "p90": 0.0017682391332224747, "p95": 0.0017717992332109134, "p99": 0.0017746473132016641, "std": 0.000046487270407847674, "mean": 0.0017263352221764054, "count": 3}, "ttft_s": {"max": 0.00710457600052905, "min": 0.0020687289998022607, "p50": 0.007100212000295869, "p90": 0.007103703200482414, "p95": 0.007104139600505733, "p99": 0.007104488720524387, "std": 0.002372893106256655, "mean": 0.005424505666875727, "count": 3}, "invalid": [], "queue_s": {"max": 0.0032025900000007823, "min": 0.0003655119999166345, "p50": 0.003187390000675805, "p90": 0.003199550000135787, "p95": 0.0032010700000682847, "p99": 0.0032022860000142828, "std": 0.0013338431554350974, "mean": 0.0022518306668644072, "count": 3}, "slo_met": null, "requests": 3, "duration_s": 0.019379880000087724, "slo_misses": [], "stop_reason": null, "output_tokens": 12, "prompt_tokens": 24, "dispatch_lag_s": {"max": 0.003032474000065122, "min": 0.0002554519996920135, "p50": 0.002934696000011172, "p90": 0.003012918400054332, "p95": 0.0030226962000597267, "p99": 0.0030305184400640428, "std": 0.0012866735812032263, "mean": 0.0020742073332561026, "count": 3}, "requests_per_s": 154.7997201214053, "slo_attainment": null, "sent_rate_ratio": null, "warmup_requests": 0, "total_tokens_per_s": 1857.5966414568638, "output_tokens_per_s": 619.1988804856212, "goodput_requests_per_s": null, "offered_requests_per_s": null, "kv_cache_occupancy_peak": 0.0, "completed_requests_per_s": null}]	{"host": "vm", "label": "v1", "model": "tiny", "device": "cpu", "run_id": "ae504380de0f4ca5a4653e2830f3381b", "compile": "off", "trace_id": null, "quantize_s": null, "started_at": "2026-11-25T18:51:51.774+00:00", "device_name": "x86_64", "finished_at": "2026-11-25T18:51:52.276+00:00", "cuda_version": null, "model_load_s": null, "quantization": "none", "weight_bytes": 558400, "torch_threads": 2, "torch_version": "2.13.0+cpu", "benchd_version": "0.1.0", "driver_version": null, "python_version": "3.11.7", "engine_settings": {"engine": "transformers", "cpu_threads": 2, "continuous_batching": {"seed": null, "block_size": 16, "num_blocks": 64, "safety_margin": null, "max_queue_size": 0, "scheduler_type": "fifo", "use_cuda_graph": [false, false], "return_logprobs": false, "max_batch_tokens": 128, "cpu_group_timeout": 300.0, "cpu_offload_space": 0.0, "max_cached_graphs": null, "max_memory_percent": 0.9, "use_async_batching": false, "allow_block_sharing": true, "decode_compile_config": null, "default_compile_level": 0, "varlen_compile_config": null, "max_blocks_per_request": 0, "max_requests_per_batch": 128, "per_request_processors": false, "q_padding_interval_size": 64, "kv_padding_interval_size": 16384, "disable_nccl_graph_mixing": true, "drop_unsupported_processors": true, "use_default_compile_configs": null, "cpu_offload_space_safety_threshold": 0.8}}, "quantized_layers": 0, "peak_memory_bytes": null, "attn_implementation": "paged|sdpa", "peak_reserved_bytes": null, "quantization_method": null, "transformers_version": "5.17.0"}	{"gpus": [], "samples": 1, "window_s": 0.019379880000087724, "energy_joules": null, "power_mean_watts": null, "throttled_fraction": null, "gpu_utilization_max": null, "cpu_utilization_mean": 1.0, "gpu_utilization_mean": null, "gpu_memory_peak_bytes": null, "energy_per_output_token_joules": null}	\N	\N	2026-11-25 18:51:38.020955+00	2026-11-25 18:51:50.908116+00	2026-11-25 18:51:52.279582+00	{"load": {"t": [1.3219178689996625], "running": [0], "waiting": [0], "kv_usage": [0.0], "output_tokens_per_s": [0.0]}, "stages": [{"end_s": 1.3384661299996878, "index": 0, "label": "concurrent=2", "start_s": 1.3190862499996001}], "hardware": {"t": [-0.08662249600001815, -0.0005600479998975061, 1.0201851310002894, 1.3410255270000562], "gpus": {}, "cpu_utilization": [1.0, 1.0, 1.0, 1.0]}}	\N	vm	\N	null	t	\N	\N
82aa21b801b2445a92f5e4a2165ed851	succeeded	fixture-kernel	matmul	kernel	\N	kernels	{"kind": "kernel", "name": "fixture-kernel", "seed": 0, "dtype": "float32", "label": null, "model": "tiny", "device": "cpu", "engine": "transformers", "kernel": {"op": "matmul", "shapes": [{"k": 32, "m": 32, "n": 32}], "warmup": 1, "repeats": 3, "flush_l2": false, "reference": null, "flush_bytes": 268435456, "implementations": null}, "openai": {"api": "completions", "model": null, "base_url": "http://127.0.0.1:8000/v1", "tokenizer": null, "extra_body": {}, "api_key_env": null, "metrics_url": null, "stream_options": {"include_usage": true}, "max_connections": null, "stall_timeout_s": 60.0, "client_processes": 1, "max_tokens_field": "max_tokens", "connect_timeout_s": 10.0, "request_timeout_s": null, "metrics_interval_s": 1.0}, "static": {"batch_size": 8}, "compile": "off", "workload": {"slo": null, "stop": {"requests": 16, "duration_s": null}, "prefix": null, "warmup": {"seconds": 0.0, "requests": 0}, "dataset": null, "arrivals": {"profile": "synchronous"}, "validity": {"max_errors": null, "min_requests": 0, "max_error_rate": null, "min_duration_s": 0.0, "oversaturation_s": null, "min_sent_rate_ratio": 0.95, "min_completion_ratio": 0.9, "max_dispatch_lag_p99_s": 0.001}, "ignore_eos": true, "conversation": null, "output_tokens": {"dist": "fixed", "value": 128}, "prompt_tokens": {"dist": "fixed", "value": 128}}, "placement": "one", "train_step": {"mode": "forward_backward", "steps": 10, "autocast": null, "batch_size": 4, "peak_tflops": null, "warmup_steps": 5, "warmup_study": null, "context_length": 512}, "quantization": "none", "transformers": {"block_size": null, "num_blocks": null, "cpu_threads": null, "compile_level": null, "use_cuda_graph": null, "library_defaults": false, "max_batch_tokens": null, "use_async_batching": null, "max_requests_per_batch": null}, "tensor_parallel": 1, "trust_remote_code": false, "attn_implementation": null}	[{"dtype": "float32", "error": null, "flops": 65536, "shape": "32x32x32", "stage": "torch 32x32x32", "kernel": "matmul", "status": "succeeded", "tflops": 0.022528706312571676, "timing": {"max": 0.000006007000592944678, "min": 0.000002451999534969218, "std": 0.0000019341014788689142, "mean": 0.0000037893332773819566, "count": 3, "median": 0.0000029089997042319737}, "warmup": 1, "reference": "torch", "implementation": "torch", "speedup_vs_reference": 1.0}]	{"host": "vm", "label": null, "model": "matmul", "device": "cpu", "run_id": "82aa21b801b2445a92f5e4a2165ed851", "compile": null, "trace_id": null, "quantize_s": null, "started_at": "2026-11-25T18:51:54.931+00:00", "device_name": "x86_64", "finished_at": "2026-11-25T18:51:54.934+00:00", "cuda_version": null, "model_load_s": null, "quantization": null, "weight_bytes": null, "torch_threads": 2, "torch_version": "2.13.0+cpu", "benchd_version": "0.1.0", "driver_version": null, "python_version": "3.11.7", "engine_settings": {}, "quantized_layers": null, "peak_memory_bytes": null, "attn_implementation": null, "peak_reserved_bytes": null, "quantization_method": null, "transformers_version": "5.17.0"}	{"gpus": [], "samples": 2, "window_s": 2.5992666109996208, "energy_joules": null, "power_mean_watts": null, "throttled_fraction": null, "gpu_utilization_max": null, "cpu_utilization_mean": 1.0, "gpu_utilization_mean": null, "gpu_memory_peak_bytes": null, "energy_per_output_token_joules": null}	\N	\N	2026-11-25 18:51:38.050731+00	2026-11-25 18:51:52.315602+00	2026-11-25 18:51:54.935371+00	{"load": {"t": [], "running": [], "waiting": [], "kv_usage": [], "output_tokens_per_s": []}, "stages": [], "hardware": {"t": [-0.05800034999992931, -0.0004381560002002516, 1.0104121340000347, 2.0572553219999463, 2.59932737500003], "gpus": {}, "cpu_utilization": [1.0, 1.0, 1.0, 1.0, 1.0]}}	\N	vm	\N	null	\N	\N	\N
e2f4075f2cb04f86a67fc4a2c1eb036c	succeeded	fixture-openai	ok	openai	\N	\N	{"kind": "generate", "name": "fixture-openai", "seed": 0, "dtype": "float32", "label": null, "model": "ok", "device": "cpu", "engine": "openai", "kernel": null, "openai": {"api": "completions", "model": null, "base_url": "http://127.0.0.1:36047/v1", "tokenizer": null, "extra_body": {}, "api_key_env": null, "metrics_url": null, "stream_options": {"include_usage": true}, "max_connections": 2, "stall_timeout_s": 60.0, "client_processes": 1, "max_tokens_field": "max_tokens", "connect_timeout_s": 10.0, "request_timeout_s": null, "metrics_interval_s": 1.0}, "static": {"batch_size": 8}, "compile": "off", "workload": {"slo": null, "stop": {"requests": 3, "duration_s": null}, "prefix": null, "warmup": {"seconds": 0.0, "requests": 0}, "dataset": {"path": "/tmp/tmptoe_p0sp/postgresql/prompts.jsonl", "field": "prompt", "format": "jsonl"}, "arrivals": {"profile": "concurrent", "concurrency": 2}, "validity": {"max_errors": null, "min_requests": 0, "max_error_rate": null, "min_duration_s": 0.0, "oversaturation_s": null, "min_sent_rate_ratio": 0.95, "min_completion_ratio": 0.9, "max_dispatch_lag_p99_s": 0.001}, "ignore_eos": true, "conversation": null, "output_tokens": {"dist": "fixed", "value": 4}, "prompt_tokens": {"dist": "fixed", "value": 8}}, "placement": "one", "train_step": {"mode": "forward_backward", "steps": 10, "autocast": null, "batch_size": 4, "peak_tflops": null, "warmup_steps": 5, "warmup_study": null, "context_length": 512}, "quantization": "none", "transformers": {"block_size": null, "num_blocks": null, "cpu_threads": null, "compile_level": null, "use_cuda_graph": null, "library_defaults": false, "max_batch_tokens": null, "use_async_batching": null, "max_requests_per_batch": null}, "tensor_parallel": 1, "trust_remote_code": false, "attn_implementation": null}	[{"e2e_s": {"max": 0.06106685499980813, "min": 0.011200322000149754, "p50": 0.0609230669997487, "p90": 0.061038097399796244, "p95": 0.06105247619980218, "p99": 0.06106397923980694, "std": 0.02347349133405624, "mean": 0.044396747999902196, "count": 3}, "itl_s": {"max": 0.0163256129999354, "min": 0.0022746089998690877, "p50": 0.008094950000668177, "p90": 0.016317841000272892, "p95": 0.016321727000104147, "p99": 0.01632483579996915, "std": 0.005415664837582755, "mean": 0.008880280111144303, "count": 9}, "stage": "concurrent=2", "valid": true, "errors": 0, "status": "succeeded", "tpot_s": {"max": 0.012186679666835213, "min": 0.002289497999906113, "p50": 0.012164662666691584, "p90": 0.012182276266806487, "p95": 0.01218447796682085, "p99": 0.01218623932683234, "std": 0.004660395392055402, "mean": 0.008880280111144303, "count": 3}, "ttft_s": {"max": 0.02450681599930249, "min": 0.004331828000431415, "p50": 0.024429078999673948, "p90": 0.02449126859937678, "p95": 0.024499042299339635, "p99": 0.024505261259309918, "std": 0.009492310815264334, "mean": 0.017755907666469284, "count": 3}, "invalid": [], "queue_s": {"max": 0.02206842499981576, "min": 0.0020348170000943355, "p50": 0.02200965899919538, "p90": 0.022056671799691684, "p95": 0.022062548399753724, "p99": 0.022067249679803353, "std": 0.009430112617557664, "mean": 0.015370966999701826, "count": 3}, "slo_met": null, "requests": 3, "duration_s": 0.0721654259996285, "slo_misses": [], "stop_reason": null, "output_tokens": 12, "prompt_tokens": 6, "dispatch_lag_s": {"max": 0.006670090999250533, "min": 0.0008250239998233155, "p50": 0.006602174999898125, "p90": 0.006656507799380052, "p95": 0.006663299399315292, "p99": 0.006668732679263485, "std": 0.002739523366662864, "mean": 0.0046990966663239915, "count": 3}, "requests_per_s": 41.571153477503806, "slo_attainment": null, "sent_rate_ratio": null, "warmup_requests": 0, "total_tokens_per_s": 249.42692086502285, "output_tokens_per_s": 166.28461391001522, "goodput_requests_per_s": null, "offered_requests_per_s": null, "kv_cache_occupancy_peak": null, "completed_requests_per_s": null}]	{"host": "vm", "label": null, "model": "ok", "device": "remote", "run_id": "e2f4075f2cb04f86a67fc4a2c1eb036c", "compile": null, "trace_id": null, "quantize_s": null, "started_at": "2026-11-25T18:51:42.478+00:00", "device_name": "http://127.0.0.1:36047/v1", "finished_at": "2026-11-25T18:51:43.375+00:00", "cuda_version": null, "model_load_s": null, "quantization": null, "weight_bytes": null, "torch_threads": null, "torch_version": "2.13.0+cpu", "benchd_version": "0.1.0", "driver_version": null, "python_version": "3.11.7", "engine_settings": {"api": "completions", "model": "ok", "base_url": "http://127.0.0.1:36047/v1", "tokenizer": null, "extra_body": {}, "stream_options": {"include_usage": true}, "dispatch_lead_s": 1.0, "max_connections": 2, "stall_timeout_s": 60.0, "client_processes": 1, "max_tokens_field": "max_tokens", "request_timeout_s": null}, "quantized_layers": null, "peak_memory_bytes": null, "attn_implementation": null, "peak_reserved_bytes": null, "quantization_method": null, "transformers_version": "5.17.0"}	{"gpus": [], "samples": 1, "window_s": 0.0721654259996285, "energy_joules": null, "power_mean_watts": null, "throttled_fraction": null, "gpu_utilization_max": null, "cpu_utilization_mean": 1.0, "gpu_utilization_mean": null, "gpu_memory_peak_bytes": null, "energy_per_output_token_joules": null}	\N	\N	2026-11-25 18:51:37.551354+00	2026-11-25 18:51:41.281443+00	2026-11-25 18:51:43.378754+00	{"load": {"t": [2.0137151310000263], "running": [0], "waiting": [0], "kv_usage": [null], "output_tokens_per_s": [0.0]}, "stages": [{"end_s": 2.0800872500003607, "index": 0, "label": "concurrent=2", "start_s": 2.007921824000732}], "hardware": {"t": [-0.03892637099943386, -0.000509538999722281, 1.0010336690002077, 2.0127486490000592, 2.0826696889998857], "gpus": {}, "cpu_utilization": [1.0, 1.0, 1.0, 1.0, 1.0]}}	\N	vm	\N	null	t	\N	\N
19986f5ac178443c87309105d011226c	succeeded	fixture-train	tiny	train_step	\N	\N	{"kind": "train_step", "name": "fixture-train", "seed": 0, "dtype": "float32", "label": null, "model": "tiny", "device": "cpu", "engine": "transformers", "kernel": null, "openai": {"api": "completions", "model": null, "base_url": "http://127.0.0.1:8000/v1", "tokenizer": null, "extra_body": {}, "api_key_env": null, "metrics_url": null, "stream_options": {"include_usage": true}, "max_connections": null, "stall_timeout_s": 60.0, "client_processes": 1, "max_tokens_field": "max_tokens", "connect_timeout_s": 10.0, "request_timeout_s": null, "metrics_interval_s": 1.0}, "static": {"batch_size": 8}, "compile": "off", "workload": {"slo": null, "stop": {"requests": 16, "duration_s": null}, "prefix": null, "warmup": {"seconds": 0.0, "requests": 0}, "dataset": null, "arrivals": {"profile": "synchronous"}, "validity": {"max_errors": null, "min_requests": 0, "max_error_rate": null, "min_duration_s": 0.0, "oversaturation_s": null, "min_sent_rate_ratio": 0.95, "min_completion_ratio": 0.9, "max_dispatch_lag_p99_s": 0.001}, "ignore_eos": true, "conversation": null, "output_tokens": {"dist": "fixed", "value": 128}, "prompt_tokens": {"dist": "fixed", "value": 128}}, "placement": "one", "train_step": {"mode": "forward_backward", "steps": 2, "autocast": null, "batch_size": 1, "peak_tflops": null, "warmup_steps": 1, "warmup_study": null, "context_length": 16}, "quantization": "none", "transformers": {"block_size": null, "num_blocks": null, "cpu_threads": null, "compile_level": null, "use_cuda_graph": null, "library_defaults": false, "max_batch_tokens": null, "use_async_batching": null, "max_requests_per_batch": null}, "tensor_parallel": 1, "trust_remote_code": false, "attn_implementation": null}	[{"mfu": null, "mode": "forward_backward", "dtype": "float32", "error": null, "flops": {"total": 10616832, "forward": 3538944, "backward": 7077888}, "model": "tiny", "stage": "warmup=1", "steps": 2, "memory": {"total": 1350144, "gradients": 558336, "parameters": 558336, "activations": 233472, "peak_allocated": null, "optimizer_states": 0}, "phases": {"step": {"max": 0.1843361390001519, "min": 0.0226483010001175, "std": 0.11433056668521625, "mean": 0.1034922200001347, "count": 2, "median": 0.1034922200001347}, "forward": {"max": 0.10258112900010019, "min": 0.0029859270007364103, "std": 0.07042444270739413, "mean": 0.0527835280004183, "count": 2, "median": 0.0527835280004183}, "backward": {"max": 0.0817550100000517, "min": 0.01966237399938109, "std": 0.043906123977822134, "mean": 0.05070869199971639, "count": 2, "median": 0.05070869199971639}}, "status": "succeeded", "autocast": null, "batch_size": 1, "parameters": 139584, "peak_tflops": null, "tokens_per_s": 154.60099319522934, "warmup_steps": 1, "context_length": 16, "achieved_tflops": 0.00010258579823668081, "matmul_precision": "fp32"}]	{"host": "vm", "label": null, "model": "tiny", "device": "cpu", "run_id": "19986f5ac178443c87309105d011226c", "compile": null, "trace_id": null, "quantize_s": null, "started_at": "2026-11-25T18:51:45.604+00:00", "device_name": "x86_64", "finished_at": "2026-11-25T18:51:45.923+00:00", "cuda_version": null, "model_load_s": null, "quantization": null, "weight_bytes": null, "torch_threads": 2, "torch_version": "2.13.0+cpu", "benchd_version": "0.1.0", "driver_version": null, "python_version": "3.11.7", "engine_settings": {}, "quantized_layers": null, "peak_memory_bytes": null, "attn_implementation": null, "peak_reserved_bytes": null, "quantization_method": null, "transformers_version": "5.17.0"}	{"gpus": [], "samples": 2, "window_s": 2.5178212769997117, "energy_joules": null, "power_mean_watts": null, "throttled_fraction": null, "gpu_utilization_max": null, "cpu_utilization_mean": 1.0, "gpu_utilization_mean": null, "gpu_memory_peak_bytes": null, "energy_per_output_token_joules": null}	\N	\N	2026-11-25 18:51:37.798311+00	2026-11-25 18:51:43.397562+00	2026-11-25 18:51:45.9287+00	{"load": {"t": [], "running": [], "waiting": [], "kv_usage": [], "output_tokens_per_s": []}, "stages": [], "hardware": {"t": [-0.032966579000458296, -0.0004454669997357996, 1.0011109619999843, 2.002569936999862, 2.517874443999972], "gpus": {}, "cpu_utilization": [1.0, 1.0, 1.0, 1.0, 1.0]}}	\N	vm	\N	null	\N	\N	\N
027ec25f3fef48d6b27aeeffebc3ab7f	succeeded	fixture-kernel	matmul	kernel	\N	\N	{"kind": "kernel", "name": "fixture-kernel", "seed": 0, "dtype": "float32", "label": null, "model": "tiny", "device": "cpu", "engine": "transformers", "kernel": {"op": "matmul", "shapes": [{"k": 32, "m": 32, "n": 32}], "warmup": 1, "repeats": 3, "flush_l2": false, "reference": null, "flush_bytes": 268435456, "implementations": null}, "openai": {"api": "completions", "model": null, "base_url": "http://127.0.0.1:8000/v1", "tokenizer": null, "extra_body": {}, "api_key_env": null, "metrics_url": null, "stream_options": {"include_usage": true}, "max_connections": null, "stall_timeout_s": 60.0, "client_processes": 1, "max_tokens_field": "max_tokens", "connect_timeout_s": 10.0, "request_timeout_s": null, "metrics_interval_s": 1.0}, "static": {"batch_size": 8}, "compile": "off", "workload": {"slo": null, "stop": {"requests": 16, "duration_s": null}, "prefix": null, "warmup": {"seconds": 0.0, "requests": 0}, "dataset": null, "arrivals": {"profile": "synchronous"}, "validity": {"max_errors": null, "min_requests": 0, "max_error_rate": null, "min_duration_s": 0.0, "oversaturation_s": null, "min_sent_rate_ratio": 0.95, "min_completion_ratio": 0.9, "max_dispatch_lag_p99_s": 0.001}, "ignore_eos": true, "conversation": null, "output_tokens": {"dist": "fixed", "value": 128}, "prompt_tokens": {"dist": "fixed", "value": 128}}, "placement": "one", "train_step": {"mode": "forward_backward", "steps": 10, "autocast": null, "batch_size": 4, "peak_tflops": null, "warmup_steps": 5, "warmup_study": null, "context_length": 512}, "quantization": "none", "transformers": {"block_size": null, "num_blocks": null, "cpu_threads": null, "compile_level": null, "use_cuda_graph": null, "library_defaults": false, "max_batch_tokens": null, "use_async_batching": null, "max_requests_per_batch": null}, "tensor_parallel": 1, "trust_remote_code": false, "attn_implementation": null}	[{"dtype": "float32", "error": null, "flops": 65536, "shape": "32x32x32", "stage": "torch 32x32x32", "kernel": "matmul", "status": "succeeded", "tflops": 0.015551969623206733, "timing": {"max": 0.000006064999979571439, "min": 0.000001931000042532105, "std": 0.0000020707585248746742, "mean": 0.0000040700000075351754, "count": 3, "median": 0.000004214000000501983}, "warmup": 1, "reference": "torch", "implementation": "torch", "speedup_vs_reference": 1.0}]	{"host": "vm", "label": null, "model": "matmul", "device": "cpu", "run_id": "027ec25f3fef48d6b27aeeffebc3ab7f", "compile": null, "trace_id": null, "quantize_s": null, "started_at": "2026-11-25T18:51:46.366+00:00", "device_name": "x86_64", "finished_at": "2026-11-25T18:51:46.367+00:00", "cuda_version": null, "model_load_s": null, "quantization": null, "weight_bytes": null, "torch_threads": 2, "torch_version": "2.13.0+cpu", "benchd_version": "0.1.0", "driver_version": null, "python_version": "3.11.7", "engine_settings": {}, "quantized_layers": null, "peak_memory_bytes": null, "attn_implementation": null, "peak_reserved_bytes": null, "quantization_method": null, "transformers_version": "5.17.0"}	{"gpus": [], "samples": 1, "window_s": 0.3603020609998566, "energy_joules": null, "power_mean_watts": null, "throttled_fraction": null, "gpu_utilization_max": null, "cpu_utilization_mean": 1.0, "gpu_utilization_mean": null, "gpu_memory_peak_bytes": null, "energy_per_output_token_joules": null}	\N	\N	2026-11-25 18:51:37.898034+00	2026-11-25 18:51:45.991159+00	2026-11-25 18:51:46.376028+00	{"load": {"t": [], "running": [], "waiting": [], "kv_usage": [], "output_tokens_per_s": []}, "stages": [], "hardware": {"t": [-0.08757241100011015, -0.003205058999810717, 0.3604589879996638], "gpus": {}, "cpu_utilization": [1.0, 1.0, 1.0]}}	\N	vm	\N	null	\N	\N	\N
beadf97081b043f4b3598f4374ae7d4d	succeeded	fixture-matrix	tiny	static	v1	\N	{"kind": "generate", "name": "fixture-matrix", "seed": 0, "dtype": "float32", "label": "v1", "model": "tiny", "device": "cpu", "engine": "static", "kernel": null, "openai": {"api": "completions", "model": null, "base_url": "http://127.0.0.1:8000/v1", "tokenizer": null, "extra_body": {}, "api_key_env": null, "metrics_url": null, "stream_options": {"include_usage": true}, "max_connections": null, "stall_timeout_s": 60.0, "client_processes": 1, "max_tokens_field": "max_tokens", "connect_timeout_s": 10.0, "request_timeout_s": null, "metrics_interval_s": 1.0}, "static": {"batch_size": 8}, "compile": "off", "workload": {"slo": null, "stop": {"requests": 3, "duration_s": null}, "prefix": null, "warmup": {"seconds": 0.0, "requests": 0}, "dataset": null, "arrivals": {"profile": "concurrent", "concurrency": 2}, "validity": {"max_errors": null, "min_requests": 0, "max_error_rate": null, "min_duration_s": 0.0, "oversaturation_s": null, "min_sent_rate_ratio": 0.95, "min_completion_ratio": 0.9, "max_dispatch_lag_p99_s": 0.001}, "ignore_eos": true, "conversation": null, "output_tokens": {"dist": "fixed", "value": 4}, "prompt_tokens": {"dist": "fixed", "value": 8}}, "placement": "one", "train_step": {"mode": "forward_backward", "steps": 10, "autocast": null, "batch_size": 4, "peak_tflops": null, "warmup_steps": 5, "warmup_study": null, "context_length": 512}, "quantization": "none", "transformers": {"block_size": 16, "num_blocks": 64, "cpu_threads": null, "compile_level": null, "use_cuda_graph": null, "library_defaults": false, "max_batch_tokens": 128, "use_async_batching": null, "max_requests_per_batch": null}, "tensor_parallel": 1, "trust_remote_code": false, "attn_implementation": null}	[{"e2e_s": {"max": 0.034035124000183714, "min": 0.007178787999691849, "p50": 0.034035124000183714, "p90": 0.034035124000183714, "p95": 0.034035124000183714, "p99": 0.034035124000183714, "std": 0.0126601982025148, "mean": 0.02508301200001976, "count": 3}, "itl_s": {"max": 0.010846565000065311, "min": 0.0013001739998799167, "p50": 0.0015567910004392616, "p90": 0.010846565000065311, "p95": 0.010846565000065311, "p99": 0.010846565000065311, "std": 0.004250202858070484, "mean": 0.00517905655558732, "count": 9}, "stage": "concurrent=2", "valid": true, "errors": 0, "status": "succeeded", "tpot_s": {"max": 0.007101897333389691, "min": 0.0013333749999825766, "p50": 0.007101897333389691, "p90": 0.007101897333389691, "p95": 0.007101897333389691, "p99": 0.007101897333389691, "std": 0.0027193075062521446, "mean": 0.00517905655558732, "count": 3}, "ttft_s": {"max": 0.01272943200001464, "min": 0.0031786629997441196, "p50": 0.01272943200001464, "p90": 0.01272943200001464, "p95": 0.01272943200001464, "p99": 0.01272943200001464, "std": 0.004502275683758365, "mean": 0.0095458423332578, "count": 3}, "invalid": [], "queue_s": {"max": 0.006942297000023245, "min": 0.0003609509994930704, "p50": 0.006942297000023245, "p90": 0.006942297000023245, "p95": 0.006942297000023245, "p99": 0.006942297000023245, "std": 0.0031024762575399, "mean": 0.00474851499984652, "count": 3}, "slo_met": null, "requests": 3, "duration_s": 0.04121391199987556, "slo_misses": [], "stop_reason": null, "output_tokens": 12, "prompt_tokens": 24, "dispatch_lag_s": {"max": 0.006161524999697576, "min": 0.00007150599958549719, "p50": 0.006070524999813642, "p90": 0.006143324999720789, "p95": 0.006152424999709183, "p99": 0.006159704999699898, "std": 0.0028496557567304565, "mean": 0.004101185333032238, "count": 3}, "requests_per_s": 72.79095466620733, "slo_attainment": null, "sent_rate_ratio": null, "warmup_requests": 0, "total_tokens_per_s": 873.4914559944879, "output_tokens_per_s": 291.1638186648293, "goodput_requests_per_s": null, "offered_requests_per_s": null, "kv_cache_occupancy_peak": null, "completed_requests_per_s": null}]	{"host": "vm", "label": "v1", "model": "tiny", "device": "cpu", "run_id": "beadf97081b043f4b3598f4374ae7d4d", "compile": "off", "trace_id": null, "quantize_s": null, "started_at": "2026-11-25T18:51:49.993+00:00", "device_name": "x86_64", "finished_at": "2026-11-25T18:51:50.847+00:00", "cuda_version": null, "model_load_s": null, "quantization": "none", "weight_bytes": 558400, "torch_threads": 2, "torch_version": "2.13.0+cpu", "benchd_version": "0.1.0", "driver_version": null, "python_version": "3.11.7", "engine_settings": {"engine": "static", "compile": "off", "batch_size": 8}, "quantized_layers": 0, "peak_memory_bytes": null, "attn_implementation": "sdpa", "peak_reserved_bytes": null, "quantization_method": null, "transformers_version": "5.17.0"}	{"gpus": [], "samples": 1, "window_s": 0.04121391199987556, "energy_joules": null, "power_mean_watts": null, "throttled_fraction": null, "gpu_utilization_max": null, "cpu_utilization_mean": 1.0, "gpu_utilization_mean": null, "gpu_memory_peak_bytes": null, "energy_per_output_token_joules": null}	\N	\N	2026-11-25 18:51:37.994118+00	2026-11-25 18:51:48.587415+00	2026-11-25 18:51:50.892433+00	{"load": {"t": [2.2050455580001653], "running": [0], "waiting": [0], "kv_usage": [null], "output_tokens_per_s": [0.0]}, "stages": [{"end_s": 2.2422191879995808, "index": 0, "label": "concurrent=2", "start_s": 2.201005275999705}], "hardware": {"t": [-0.24694844100031332, -0.0004649820002669003, 1.0129864259997703, 2.017111630999352, 2.2484493259999], "gpus": {}, "cpu_utilization": [1.0, 1.0, 0.995, 1.0, 1.0]}}	\N	vm	\N	null	t	\N	cbd420460f034e639ba24ae59d5a7f94
\.


--
-- Data for Name: schedules; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.schedules (name, spec, interval_s, enabled, created_at) FROM stdin;
nightly	{"name": "fixture", "label": "v1", "workload": {"stop": {"requests": 3}, "arrivals": {"profile": "concurrent", "concurrency": 2}, "output_tokens": {"dist": "fixed", "value": 4}, "prompt_tokens": {"dist": "fixed", "value": 8}}, "transformers": {"block_size": 16, "num_blocks": 64, "max_batch_tokens": 128}}	86400	t	2026-11-25 18:51:37.930433+00
kernels	{"kind": "kernel", "name": "fixture-kernel", "kernel": {"op": "matmul", "shapes": [{"k": 32, "m": 32, "n": 32}], "warmup": 1, "repeats": 3, "flush_l2": false}}	86400	t	2026-11-25 18:51:37.979634+00
\.


--
-- Data for Name: timings; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.timings (run_id, stage_index, series, index, warmup, seconds) FROM stdin;
19986f5ac178443c87309105d011226c	0	forward	0	t	0.04486659800022608
19986f5ac178443c87309105d011226c	0	backward	0	t	0.028838809999797377
19986f5ac178443c87309105d011226c	0	step	0	t	0.07370540800002345
19986f5ac178443c87309105d011226c	0	forward	1	f	0.0029859270007364103
19986f5ac178443c87309105d011226c	0	backward	1	f	0.01966237399938109
19986f5ac178443c87309105d011226c	0	step	1	f	0.0226483010001175
19986f5ac178443c87309105d011226c	0	forward	2	f	0.10258112900010019
19986f5ac178443c87309105d011226c	0	backward	2	f	0.0817550100000517
19986f5ac178443c87309105d011226c	0	step	2	f	0.1843361390001519
027ec25f3fef48d6b27aeeffebc3ab7f	0	torch	1	f	6.064999979571439e-06
027ec25f3fef48d6b27aeeffebc3ab7f	0	torch	2	f	4.214000000501983e-06
027ec25f3fef48d6b27aeeffebc3ab7f	0	torch	3	f	1.931000042532105e-06
82aa21b801b2445a92f5e4a2165ed851	0	torch	1	f	6.007000592944678e-06
82aa21b801b2445a92f5e4a2165ed851	0	torch	2	f	2.451999534969218e-06
82aa21b801b2445a92f5e4a2165ed851	0	torch	3	f	2.9089997042319737e-06
\.


--
-- Name: alembic_version alembic_version_pkc; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.alembic_version
    ADD CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num);


--
-- Name: baselines baselines_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.baselines
    ADD CONSTRAINT baselines_pkey PRIMARY KEY (workload);


--
-- Name: matrices matrices_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.matrices
    ADD CONSTRAINT matrices_pkey PRIMARY KEY (id);


--
-- Name: requests requests_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.requests
    ADD CONSTRAINT requests_pkey PRIMARY KEY (run_id, stage_index, gpu, index);


--
-- Name: run_stages run_stages_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_stages
    ADD CONSTRAINT run_stages_pkey PRIMARY KEY (run_id, stage_index, gpu);


--
-- Name: runs runs_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.runs
    ADD CONSTRAINT runs_pkey PRIMARY KEY (id);


--
-- Name: schedules schedules_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.schedules
    ADD CONSTRAINT schedules_pkey PRIMARY KEY (name);


--
-- Name: timings timings_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.timings
    ADD CONSTRAINT timings_pkey PRIMARY KEY (run_id, stage_index, series, index);


--
-- Name: ix_matrices_created_at; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_matrices_created_at ON public.matrices USING btree (created_at);


--
-- Name: ix_matrices_node; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_matrices_node ON public.matrices USING btree (node);


--
-- Name: ix_matrices_status; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_matrices_status ON public.matrices USING btree (status);


--
-- Name: ix_matrices_workload; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_matrices_workload ON public.matrices USING btree (workload);


--
-- Name: ix_runs_created_at; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_runs_created_at ON public.runs USING btree (created_at);


--
-- Name: ix_runs_matrix_id; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_runs_matrix_id ON public.runs USING btree (matrix_id);


--
-- Name: ix_runs_model; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_runs_model ON public.runs USING btree (model);


--
-- Name: ix_runs_node; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_runs_node ON public.runs USING btree (node);


--
-- Name: ix_runs_schedule; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_runs_schedule ON public.runs USING btree (schedule);


--
-- Name: ix_runs_status; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_runs_status ON public.runs USING btree (status);


--
-- Name: ix_runs_workload; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_runs_workload ON public.runs USING btree (workload);


--
-- Name: baselines baselines_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.baselines
    ADD CONSTRAINT baselines_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id) ON DELETE CASCADE;


--
-- Name: requests requests_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.requests
    ADD CONSTRAINT requests_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id) ON DELETE CASCADE;


--
-- Name: run_stages run_stages_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_stages
    ADD CONSTRAINT run_stages_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id) ON DELETE CASCADE;


--
-- Name: timings timings_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.timings
    ADD CONSTRAINT timings_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id) ON DELETE CASCADE;


--
-- PostgreSQL database dump complete
--

\unrestrict 8QaqAGkqnIfskKcDx8TUNGSFSYbCEVbRIh1CNtPTqPbZpAbV1oo4HklwpezVx18

