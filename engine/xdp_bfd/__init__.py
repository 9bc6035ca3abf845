"""xdp-bfd: BFD with the fast path in XDP."""

__version__ = "0.1.0"
