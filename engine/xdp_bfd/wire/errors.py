"""The one error type every codec in :mod:`xdp_bfd.wire` raises."""

from __future__ import annotations


class CodecError(ValueError):
    """Bytes that do not decode.

    ``reason`` is a short, stable token (``"short"``, ``"version"``, ``"length"``…)
    used as the name of the drop counter the packet is charged to, so it must
    not change between releases.
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
