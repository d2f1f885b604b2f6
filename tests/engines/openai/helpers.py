"""What the openai engine's tests share: a spec against a server, a run's records in order."""



from benchd.spec import parse_spec


def openai_spec(base_url, model="ok", api="completions", requests=4, output=7, prompts=None, tokenizer=None,
                arrivals=None, stop=None, **openai):
    workload = {"arrivals": arrivals or {"profile": "concurrent", "concurrency": 2},
                "stop": stop or {"requests": requests},
                "output_tokens": {"dist": "fixed", "value": output}}
    if prompts is not None:
        workload["dataset"] = {"format": "jsonl", "path": prompts}
    else:
        workload["prompt_tokens"] = {"dist": "fixed", "value": 12}
    return parse_spec({"name": "oa", "engine": "openai", "model": model, "workload": workload,
                       "openai": {"base_url": base_url, "api": api, "tokenizer": tokenizer, **openai}})


def records(outcome):
    return sorted(outcome.stages[0].records, key=lambda r: r.index)
