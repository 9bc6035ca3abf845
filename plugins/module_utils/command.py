# -*- coding: utf-8 -*-
# Copyright: xdp_bfd.fastpath developers
# GNU General Public License v2.0 or later (see LICENSE or https://www.gnu.org/licenses/old-licenses/gpl-2.0.txt),
# which includes version 3 of the License (https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-2.0-or-later

"""The one command runner of the collection's modules.

Every command is an argv list handed to ``AnsibleModule.run_command`` (never a
shell). :meth:`Runner.run` returns stdout or raises :class:`CommandError`
(exit status not 0, or output the caller's ``refused`` test recognises as a
refusal: ethtool 6.1 and vtysh report some refusals with status 0).
:meth:`Runner.fail` is the one way a module fails: ``fail_json`` with the
message, the commands recorded so far and the module's context keys, so a
failure is always a ``msg``, never a traceback.

Not community.general's ``CmdRunner``: what it adds (formatting named options
into argv) the pure builders in ``frr_bfd`` and ``ethtool`` already do, its
``check_rc`` failures would replace the modules' messages, and the modules
would import another collection at run time (ansible-test's import sanity
sees only this one).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class CommandError(Exception):
    """A command that failed: its argv, exit status and output."""

    def __init__(self, argv, rc, out, err):
        self.argv = list(argv)
        self.rc = rc
        self.out = out or ""
        self.err = err or ""
        # What the command said: stderr, else stdout.
        self.text = self.err.strip() or self.out.strip()
        Exception.__init__(self, self.describe())

    def describe(self, name=None):
        """``NAME failed (rc N): TEXT``; NAME defaults to the whole command line."""
        return "%s failed (rc %d): %s" % (name or " ".join(self.argv), self.rc, self.text or "no output")


class Runner(object):
    """Runs a module's commands and fails it with their context.

    ``commands`` is the list a module returns as ``commands`` (the commands
    that changed something, or would in check mode); the module appends to it.
    ``context`` keys are added to every failure (e.g. ``interface``).
    """

    def __init__(self, module, **context):
        self.module = module
        self.context = context
        self.commands = []

    def binary(self, name):
        """Path of a required executable (the module fails naming it when it is missing)."""
        return self.module.get_bin_path(name, required=True)

    def run(self, argv, refused=None):
        """Run ``argv``; return its stdout, or raise :class:`CommandError`.

        ``refused(rc, out, err)`` marks a refusal the exit status does not show.
        """
        rc, out, err = self.module.run_command(list(argv))
        if rc != 0 or (refused is not None and refused(rc, out or "", err or "")):
            raise CommandError(argv, rc, out, err)
        return out or ""

    def run_or_fail(self, argv, refused=None):
        """:meth:`run`, failing the module with ``CMDLINE failed (rc N): TEXT``."""
        try:
            return self.run(argv, refused)
        except CommandError as e:
            self.fail(str(e))

    def fail(self, msg, **extra):
        result = dict(self.context)
        result["commands"] = self.commands
        result.update(extra)
        self.module.fail_json(msg=msg, **result)
