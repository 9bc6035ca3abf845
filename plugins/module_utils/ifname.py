# -*- coding: utf-8 -*-
# Copyright: xdp_bfd.fastpath developers
# GNU General Public License v2.0 or later (see LICENSE or https://www.gnu.org/licenses/old-licenses/gpl-2.0.txt),
# which includes version 3 of the License (https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-2.0-or-later

"""Interface names, by the kernel's rule (``dev_valid_name`` in net/core/dev.c)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# The kernel's buffer for a name, its NUL included.
IFNAMSIZ = 16


def valid(name):
    """Whether ``name`` can be a network interface's name.

    The kernel's rule: 1 to IFNAMSIZ - 1 (15) bytes, not ``.`` or ``..``, no
    ``/``, ``:`` or whitespace. Also refused: a leading ``-``, which the
    commands the modules run (ethtool, vtysh) would read as an option.
    """
    if not name or name in (".", ".."):
        return False
    if len(name.encode("utf-8")) > IFNAMSIZ - 1:
        return False
    if name.startswith("-"):
        return False
    return not any(c in "/:" or c.isspace() for c in name)
