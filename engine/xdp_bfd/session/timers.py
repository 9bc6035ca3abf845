"""Pure timing arithmetic of RFC 5880 §6.8.2-§6.8.4 and §6.8.7."""

from __future__ import annotations

import random

__all__ = ["SLOW_TX_US", "echo_tx_interval_us", "jittered", "next_sequence", "sequence_in_window"]

# §6.8.3: while not Up, bfd.DesiredMinTxInterval MUST be at least one second.
SLOW_TX_US = 1_000_000

_U32 = 1 << 32


def jittered(interval_us: int, detect_mult: int, rng: random.Random) -> int:
    """One transmit interval with §6.8.7 jitter applied.

    The interval is reduced by a random 0-25 % so that systems on a shared
    segment do not self-synchronise. With bfd.DetectMult of 1 it must also be
    at most 90 % so that the peer's Detection Time (one interval) cannot pass
    before the next packet arrives.
    """
    most = interval_us // 4
    least = -(-interval_us // 10) if detect_mult == 1 else 0
    return interval_us - rng.randint(min(least, most), most)


def sequence_in_window(sequence: int, last: int, detect_mult: int, *, meticulous: bool) -> bool:
    """§6.7.3/§6.7.4 replay window, in the circular unsigned 32-bit number space.

    Keyed: bfd.RcvAuthSeq .. bfd.RcvAuthSeq + 3*DetectMult inclusive (a repeat is
    fine). Meticulous: the same but starting at bfd.RcvAuthSeq + 1, so every
    packet must advance the sequence.
    """
    ahead = (sequence - last) % _U32
    return (1 if meticulous else 0) <= ahead <= 3 * detect_mult


def echo_tx_interval_us(min_echo_tx_us: int, remote_min_echo_rx_us: int) -> int:
    """RFC 5880 §6.8.9: echo at the slower of our interval and the peer's; 0 = do not send.

    bfdd 8.4 sends only its configured interval and later ones already apply
    this max(), so the data plane does it itself either way.
    """
    if remote_min_echo_rx_us == 0 or min_echo_tx_us == 0:
        return 0
    return max(min_echo_tx_us, remote_min_echo_rx_us)


def next_sequence(sequence: int) -> int:
    """bfd.XmitAuthSeq wraps as an unsigned 32-bit value (§6.7.3)."""
    return (sequence + 1) % _U32
