"""bfddp: FRR's bfdd drives the engine over its distributed-BFD protocol (shared/docs/bfddp.md)."""

from .dataplane import Dataplane

__all__ = ["Dataplane"]
