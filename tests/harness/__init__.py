"""Test harness: namespaces, real FRR, wire captures and packet injection; frame builders.

The integration pieces talk to real kernels and daemons. Two pieces stand in
for what a unit test cannot have: ``fakehost.FakeHost``, a small real
implementation of the engine's Host protocol (checked against it by
tests/unit/harness/test_fakehost.py), and ``xdp_oracle``, the Python model of what the
XDP program does with a frame (checked against the kernel by
tests/integration/test_fastpath_rejects.py). Every
wait is bounded (see :func:`harness.wait.wait_until`) and every resource made
is registered for cleanup the moment it exists.
"""
