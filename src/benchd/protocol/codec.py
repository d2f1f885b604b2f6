"""The one codec of the pipe between daemon and worker: a message to MessagePack bytes and back, decoded by its
tag into its record (msgspec, as vLLM V1 encodes its engine core's messages)."""

from __future__ import annotations

import numbers
import typing
from typing import Any

import msgspec
from pydantic import BaseModel

from benchd.protocol import events, messages
from benchd.protocol.messages import Command, Report


class ProtocolError(ValueError):
    """Bytes that are not a message of the protocol (garbled, or of a kind or shape it does not define), or a
    message that cannot be encoded: the side that sent or built it is at fault (a worker's: the supervisor replaces
    it), never the one that read it."""


def _enc_hook(value: Any) -> Any:
    if isinstance(value, BaseModel):  # RunMetadata, in a Done
        return value.model_dump(mode="json")
    if isinstance(value, numbers.Integral):  # numpy's numbers (msgspec takes only Python's): the number they are
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    raise TypeError(f"{type(value).__name__} is not part of the protocol")


def _dec_hook(kind: type, value: Any) -> Any:
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return kind.model_validate(value)  # its ValidationError is a ValueError: msgspec names the field
    raise NotImplementedError(f"{kind!r} is not part of the protocol")


# msgspec's encoders and decoders are safe to share between threads (since 0.16): one of each for every pipe.
_encoder = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_commands = msgspec.msgpack.Decoder(Command, dec_hook=_dec_hook)
_reports = msgspec.msgpack.Decoder(Report, dec_hook=_dec_hook)


def encode(message: Command | Report) -> bytes:
    """ProtocolError if a field holds what the protocol does not carry (the sender's fault)."""
    try:
        return _encoder.encode(message)
    except (TypeError, OverflowError) as error:
        raise ProtocolError(f"{type(message).__name__} cannot be encoded: {error}") from None


def decode_command(data: bytes) -> Command:
    """What the daemon sent; ProtocolError if it is not a command."""
    return _decode(_commands, data, "command")


def decode_report(data: bytes) -> Report:
    """What a worker sent; ProtocolError if it is not a report (with a batch of well-formed events)."""
    return _decode(_reports, data, "report")


def _decode(decoder: msgspec.msgpack.Decoder, data: bytes, what: str) -> Any:
    try:
        return decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        head = data[:48].hex(" ")
        raise ProtocolError(f"not a {what} of the protocol ({error}); {len(data)} bytes, starting {head}") from None


def kinds(union: Any) -> tuple[type, ...]:
    """The record types of a union (messages.Command, messages.Report, events.AnyEvent)."""
    return typing.get_args(union)


COMMANDS, REPORTS, EVENTS = kinds(messages.Command), kinds(messages.Report), kinds(events.AnyEvent)


def stated_protocol(data: bytes) -> int | str | None:
    """The protocol version a first message that did not decode states, read without its types: a hello of another
    version (version 1 stated none: its hello began with the pid, then torch's version); None: no hello at all."""
    try:
        raw = msgspec.msgpack.decode(data)
    except msgspec.DecodeError:
        return None
    if isinstance(raw, list) and len(raw) > 2 and raw[0] == "Hello":
        return raw[1] if isinstance(raw[2], int) else "1 (which states no version)"
    return None
