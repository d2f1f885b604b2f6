"""XID errors through NVML's event API: each GPU registered once, the event set drained at every read."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("benchd.hardware.reader")

XID_EVENT = 0x8  # nvmlEventTypeXidCriticalError
# Codes are label values: NVIDIA documents codes up to about 170, so anything past MAX_XID is counted as "other"
# and a faulty driver cannot grow the series count without bound.
MAX_XID = 1023
# A drain waits 1 ms for an event when none is queued (NVML documents no meaning for 0) and takes at most this many
# events per read, so that an event storm cannot hold the sampler.
WAIT_MS = 1
MAX_EVENTS_PER_DRAIN = 256


def xid_label(code: int) -> str:
    return str(code) if 0 <= code <= MAX_XID else "other"


class XidWatcher:
    """Counts XID events per GPU (by UUID) and code. NVML says that when several XIDs arrive between two waits, each
    event carries the latest code: counts are exact, codes of a burst may repeat the last one."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self._set: Any = None
        self.counts: dict[str, dict[str, int]] = {}  # uuid → code label → events since registration
        self.last: dict[str, int] = {}  # uuid → the latest code (0: none yet), as DCGM_FI_DEV_XID_ERRORS
        self._failed = False

    def register(self, handle: Any, uuid: str, index: int) -> bool:
        """Watch one GPU; False (and one log line) where the GPU, driver or bindings cannot."""
        nvml = self._nvml
        try:
            if not nvml.nvmlDeviceGetSupportedEventTypes(handle) & XID_EVENT:
                log.info("GPU %d reports no XID events: no XID counter", index)
                return False
            if self._set is None:
                self._set = nvml.nvmlEventSetCreate()
            nvml.nvmlDeviceRegisterEvents(handle, XID_EVENT, self._set)
        except (nvml.NVMLError, AttributeError) as error:  # AttributeError: bindings without the event API
            log.info("GPU %d: XID events cannot be watched (%s): no XID counter", index, error)
            return False
        self.counts[uuid], self.last[uuid] = {}, 0
        return True

    def drain(self) -> None:
        """Count the events queued since the previous drain."""
        if self._set is None or self._failed:
            return
        nvml = self._nvml
        timeout = getattr(nvml, "NVMLError_Timeout", ())
        for _ in range(MAX_EVENTS_PER_DRAIN):
            try:
                event = nvml.nvmlEventSetWait(self._set, WAIT_MS)
                if not event.eventType & XID_EVENT:
                    continue
                uuid = _text(nvml.nvmlDeviceGetUUID(event.device))
            except timeout:
                return
            except nvml.NVMLError as error:
                log.warning("XID events stop (%s)", error)
                self._failed = True
                return
            counts = self.counts.get(uuid)
            if counts is None:  # a GPU this reader does not watch
                continue
            code = int(event.eventData)
            label = xid_label(code)
            counts[label] = counts.get(label, 0) + 1
            self.last[uuid] = code

    def close(self) -> None:
        if self._set is not None:
            try:
                self._nvml.nvmlEventSetFree(self._set)
            except self._nvml.NVMLError:
                pass
            self._set = None


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
