"""Wire codecs: pure functions, total on arbitrary bytes."""

from __future__ import annotations

from .bfddp import (
    AddSession,
    CountersReply,
    CountersRequest,
    DeleteSession,
    EchoReply,
    EchoRequest,
    FrameReader,
    Message,
    MessageType,
    RemoteFlags,
    SessionFlags,
    SessionMessage,
    StateChange,
    decode_message,
    encode_message,
)
from .control import (
    Auth,
    AuthType,
    ControlPacket,
    Diag,
    State,
    decode_control,
    encode_control,
    verify_auth,
)
from .echo import ECHO_LEN, ECHO_MAGIC, EchoPacket, decode_echo, encode_echo
from .errors import CodecError

__all__ = [
    "ECHO_LEN",
    "ECHO_MAGIC",
    "AddSession",
    "Auth",
    "AuthType",
    "CodecError",
    "ControlPacket",
    "CountersReply",
    "CountersRequest",
    "DeleteSession",
    "Diag",
    "EchoPacket",
    "EchoReply",
    "EchoRequest",
    "FrameReader",
    "Message",
    "MessageType",
    "RemoteFlags",
    "SessionFlags",
    "SessionMessage",
    "State",
    "StateChange",
    "decode_control",
    "decode_echo",
    "decode_message",
    "encode_control",
    "encode_echo",
    "encode_message",
    "verify_auth",
]
