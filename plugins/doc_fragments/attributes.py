# -*- coding: utf-8 -*-
# Copyright: xdp_bfd.fastpath developers
# GNU General Public License v2.0 or later (see LICENSE or https://www.gnu.org/licenses/old-licenses/gpl-2.0.txt),
# which includes version 3 of the License (https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-2.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # What the attributes mean. A module extends this and says, under its own
    # attributes:, how far it supports each (support:, and details: where it
    # helps), as community.general's modules do.
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in C(check_mode) and return changed status prediction without modifying target.
  diff_mode:
    description: Returns details on what has changed (or possibly needs changing in C(check_mode)), when in diff mode.
"""

    # With the standard fragment, for a module that never changes anything.
    INFO_MODULE = r"""
options: {}
attributes:
  check_mode:
    support: full
    details:
      - This action does not modify state.
  diff_mode:
    support: N/A
    details:
      - This action does not modify state.
"""
