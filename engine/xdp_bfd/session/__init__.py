"""The sans-I/O RFC 5880 session: feed packets and ``now``, ask what to send and when to wake.

Nothing here reads a clock, opens a socket or sleeps; every time is an integer
number of microseconds supplied by the caller (the event loop).
"""

from __future__ import annotations

from .config import AuthConfig, SessionConfig, SessionKey
from .events import Rejected, RemoteParamsChanged, StateChanged
from .machine import Session
from .timers import SLOW_TX_US

__all__ = [
    "SLOW_TX_US",
    "AuthConfig",
    "Rejected",
    "RemoteParamsChanged",
    "Session",
    "SessionConfig",
    "SessionKey",
    "StateChanged",
]
