"""Integration harness: namespaces, real FRR, wire captures and packet injection.

Everything here talks to real kernels and daemons; nothing is simulated. Every
wait is bounded (see :func:`harness.wait.wait_until`) and every resource made
is registered for cleanup the moment it exists.
"""
