"""Quantizing a loaded model's linear layers (torchao or bitsandbytes) in the worker, and what the weights take."""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass

import torch
from torch import nn

try:
    from torch.distributed.tensor import DTensor
except ImportError:  # a torch built without distributed: no tensor-parallel shards
    DTensor = None  # type: ignore[assignment, misc]  # the checker's torch has it; this one does not

from benchd.spec import SpecError
from benchd.spec.stack import QUANTIZATIONS, installed

FLOAT8_CAPABILITY = (8, 9)  # torch._scaled_mm's float8 needs Ada or Hopper
INT4_GROUP = 128  # torchao's default group size for int4 weight-only


@dataclass(frozen=True, slots=True)
class Quantized:
    method: str  # what did it: library, version and configuration
    layers: int  # linear layers quantized


def weight_bytes(model: nn.Module) -> int:
    """Bytes of every parameter and buffer as stored: a quantized tensor subclass counts its inner tensors (int8 data,
    scales, zero points), not the float type it presents."""
    return sum(tensor_bytes(t) for t in (*model.parameters(), *model.buffers()))


def streamed_weight_bytes(model: nn.Module) -> int:
    """What a forward step reads of the weights: all of them (weight_bytes), but an input embedding the head does
    not share, of which a step reads only its tokens' rows (benchd.measure.roofline)."""
    total = weight_bytes(model)
    embedding, head = model.get_input_embeddings(), model.get_output_embeddings()
    if embedding is not None and (head is None or head.weight is not embedding.weight):
        total -= tensor_bytes(embedding.weight)
    return total


def tensor_bytes(t: torch.Tensor) -> int:
    """A tensor-parallel shard (a DTensor) counts as the whole tensor: the group's model, as its other figures."""
    if DTensor is not None and isinstance(t, DTensor):
        return t.numel() * t.element_size()  # its global shape (its flatten names its mesh beside its local shard)
    flatten = getattr(t, "__tensor_flatten__", None)  # torchao's subclasses name their inner tensors
    if flatten is not None:
        names, _ = flatten()
        return sum(tensor_bytes(inner) for name in names if isinstance(inner := getattr(t, name, None), torch.Tensor))
    total = t.numel() * t.element_size()
    for extra in ("SCB",):  # bitsandbytes int8: row scales beside the int8 data
        if isinstance(getattr(t, extra, None), torch.Tensor):
            total += tensor_bytes(getattr(t, extra))
    state = getattr(t, "quant_state", None)  # bitsandbytes 4-bit: block absmax (and its own quantization)
    if state is not None and isinstance(getattr(state, "absmax", None), torch.Tensor):
        total += tensor_bytes(state.absmax)
    return total


def _targets(model: nn.Module) -> list[tuple[nn.Module, str, nn.Linear]]:
    """Every linear layer but the output projection (quantizing the logits' layer costs accuracy for little: it is
    also the tied embedding in many models)."""
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    found = []
    for parent in model.modules():
        for name, child in parent.named_children():
            if isinstance(child, nn.Linear) and child is not output:
                found.append((parent, name, child))
    return found


def check(quantization: str, device: torch.device, dtype: torch.dtype) -> None:
    """What admission could not know: the package really imports here, the GPU's generation, the weights' type."""
    method = QUANTIZATIONS[quantization]
    if method.package is not None and not installed(method.package):
        raise SpecError(f"quantization: {quantization} needs {method.needs}: {method.package} is not installed")
    if device.type not in method.devices:
        raise SpecError(f"quantization: {quantization} needs {method.needs}: it does not run on {device.type}")
    if quantization == "float8" and torch.cuda.get_device_capability(device) < FLOAT8_CAPABILITY:
        found = ".".join(map(str, torch.cuda.get_device_capability(device)))
        raise SpecError(f"quantization: float8 needs a GPU of compute capability 8.9 or newer; "
                        f"{torch.cuda.get_device_name(device)} is {found}")
    if quantization == "int4_weight_only" and dtype != torch.bfloat16:
        raise SpecError(f"quantization: int4_weight_only (torch's tinygemm kernel) takes bfloat16 weights, not "
                        f"{str(dtype).removeprefix('torch.')}: set dtype bfloat16")


def quantize(model: nn.Module, quantization: str, device: torch.device, dtype: torch.dtype) -> Quantized | None:
    """Quantize in place; None for quantization none."""
    if quantization == "none":
        return None
    check(quantization, device, dtype)
    if quantization.startswith("bnb_"):
        return _bitsandbytes(model, quantization, device, dtype)
    return _torchao(model, quantization)


def _torchao(model: nn.Module, quantization: str) -> Quantized:
    from torchao.quantization import (
        Float8DynamicActivationFloat8WeightConfig,
        Int4WeightOnlyConfig,
        Int8DynamicActivationInt8WeightConfig,
        Int8WeightOnlyConfig,
        PerRow,
        quantize_,
    )

    configs = {
        "int8_weight_only": lambda: Int8WeightOnlyConfig(version=2),
        "int8_dynamic": lambda: Int8DynamicActivationInt8WeightConfig(version=2),
        # tile_packed_to_4d: torch's own tinygemm kernel; the default "plain" format needs the mslk package
        "int4_weight_only": lambda: Int4WeightOnlyConfig(group_size=INT4_GROUP,
                                                         int4_packing_format="tile_packed_to_4d"),
        "float8": lambda: Float8DynamicActivationFloat8WeightConfig(granularity=PerRow()),
    }
    config = configs[quantization]()
    targets = {id(layer) for _, _, layer in _targets(model)}
    before = {id(m): type(m.weight) for m in model.modules() if id(m) in targets}
    quantize_(model, config, filter_fn=lambda module, name: id(module) in targets)
    layers = sum(1 for m in model.modules() if id(m) in targets and type(m.weight) is not before[id(m)])
    return Quantized(f"torchao {importlib.metadata.version('torchao')} {type(config).__name__}"
                     f"({_describe(config, quantization)})", layers)


def _describe(config, quantization: str) -> str:
    if quantization == "int4_weight_only":
        return f"group_size={config.group_size}, packing=tile_packed_to_4d"
    if quantization == "float8":
        return "granularity=PerRow"
    return f"version={config.version}"


def _bitsandbytes(model: nn.Module, quantization: str, device: torch.device, dtype: torch.dtype) -> Quantized:
    import bitsandbytes as bnb

    layers = 0
    for parent, name, linear in _targets(model):
        bias = linear.bias is not None
        weight = linear.weight.data.to("cpu")  # bitsandbytes quantizes as the parameter moves to the GPU
        if quantization == "bnb_8bit":
            # LLM.int8(): outlier columns beyond the threshold stay in 16 bits (bitsandbytes' recommended 6.0)
            new = bnb.nn.Linear8bitLt(linear.in_features, linear.out_features, bias=bias, has_fp16_weights=False,
                                      threshold=6.0)
            new.weight = bnb.nn.Int8Params(weight, requires_grad=False, has_fp16_weights=False)
        else:
            new = bnb.nn.Linear4bit(linear.in_features, linear.out_features, bias=bias, compute_dtype=dtype,
                                    quant_type="nf4")
            new.weight = bnb.nn.Params4bit(weight, requires_grad=False, quant_type="nf4")
        if bias:
            new.bias = nn.Parameter(linear.bias.data.to("cpu"), requires_grad=False)
        setattr(parent, name, new.to(device))
        layers += 1
    detail = "LLM.int8, threshold 6.0" if quantization == "bnb_8bit" else "nf4"
    return Quantized(f"bitsandbytes {importlib.metadata.version('bitsandbytes')} "
                     f"{'Linear8bitLt' if quantization == 'bnb_8bit' else 'Linear4bit'} ({detail})", layers)
