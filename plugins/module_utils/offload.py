# -*- coding: utf-8 -*-
# Copyright: xdp_bfd.fastpath developers
# GNU General Public License v2.0 or later (see LICENSE or https://www.gnu.org/licenses/old-licenses/gpl-2.0.txt),
# which includes version 3 of the License (https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-2.0-or-later

"""Is the XDP offload live? Signal the engine, wait for fresh stats, judge them.

The stats JSON and the definition of *live* are contracts (DESIGN.md, "Stats JSON"):
``kernel_tx`` is true; the dataplane is connected when one is configured (``dplane``
not null); ``sessions_up == sessions_configured``; the file was written after our
signal; and every Up session has a recent kernel transmission (``last_ktx_age_us``).
A zero kernel TX count on an Up session means userspace is answering, not the offload.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import json
import time

from ansible_collections.xdp_bfd.fastpath.plugins.module_utils import frr_bfd, locate

DEFAULT_PROCESS_NAME = "xdp-bfd"
# A session's kernel TX is "recent" when younger than this many detection times (the fast
# path answers every peer packet, so a healthy age stays below one packet interval).
KTX_AGE_DETECT_FACTOR = 3
# Used when a session reports no detection time.
KTX_AGE_FALLBACK_US = 3000000
# generated_at is rounded to the millisecond by the engine.
GENERATED_AT_SLACK_S = 0.001
POLL_INTERVAL_S = 0.1

# Indirection so unit tests can drive the clock.
_clock = time.time
_sleep = time.sleep


def ktx_age_bound_us(session, max_ktx_age_us=None):
    """The largest ``last_ktx_age_us`` still counted as recent for ``session``."""
    if max_ktx_age_us is not None:
        return int(max_ktx_age_us)
    detect = session.get("detect_time_us") or 0
    if detect > 0:
        return KTX_AGE_DETECT_FACTOR * int(detect)
    return KTX_AGE_FALLBACK_US


def session_name(s):
    name = "%s->%s" % (s.get("local") or "*", s.get("peer"))
    if s.get("ifname"):
        name += " on %s" % s["ifname"]
    if s.get("multihop"):
        name += " (multihop)"
    return name


def session_reasons(session, max_ktx_age_us=None):
    """Why one Up session is not answered by the fast path ([] when it is)."""
    if session.get("state") != "up":
        return []
    name = session_name(session)
    ktx = session.get("kernel_tx_packets")
    age = session.get("last_ktx_age_us")
    if not ktx:
        return ["session %s is up but the kernel has sent nothing for it (userspace is answering)" % name]
    if age is None:
        return ["session %s is up but has no last kernel TX time" % name]
    bound = ktx_age_bound_us(session, max_ktx_age_us)
    if age > bound:
        return [
            "session %s: last kernel TX %d us ago, more than %d us (userspace is answering)"
            % (name, age, bound)
        ]
    return []


def evaluate(stats, signal_time=None, max_ktx_age_us=None, min_sessions=1):
    """(live, reasons) for a stats document; ``signal_time`` None skips the freshness rule."""
    reasons = []
    if not isinstance(stats, dict):
        return False, ["no stats document"]
    if signal_time is not None:
        generated = stats.get("generated_at")
        if not isinstance(generated, (int, float)):
            reasons.append("stats have no generated_at")
        elif generated + GENERATED_AT_SLACK_S < signal_time:
            reasons.append(
                "stats were generated at %.3f, before the signal at %.3f (the engine wrote none in time)"
                % (generated, signal_time)
            )
    if stats.get("kernel_tx") is not True:
        reasons.append("kernel_tx is not true: the XDP fast path is not attached")
    dplane = stats.get("dplane")
    if dplane is not None and not (isinstance(dplane, dict) and dplane.get("connected") is True):
        addr = dplane.get("address") if isinstance(dplane, dict) else None
        reasons.append("dataplane %sis not connected to bfdd" % ("%s " % addr if addr else ""))
    configured = stats.get("sessions_configured")
    up = stats.get("sessions_up")
    if configured != up:
        reasons.append("%s of %s configured sessions are up" % (up, configured))
    if isinstance(configured, int) and configured < min_sessions:
        reasons.append("%d sessions configured, fewer than %d" % (configured, min_sessions))
    for s in stats.get("sessions") or []:
        reasons.extend(session_reasons(s, max_ktx_age_us))
    return not reasons, reasons


def _same_ip(a, b):
    try:
        return ipaddress.ip_address(a) == ipaddress.ip_address(b)
    except ValueError:
        return False


def find_session(stats, peer, local=None, interface=None, multihop=False):
    """The engine's session for one BFD peer, or None."""
    for s in (stats or {}).get("sessions") or []:
        if not _same_ip(s.get("peer"), peer):
            continue
        if bool(s.get("multihop")) != bool(multihop):
            continue
        if local and s.get("local") and not _same_ip(s.get("local"), local):
            continue
        if interface and s.get("ifname") and s.get("ifname") != interface:
            continue
        return s
    return None


def peer_offload_reasons(stats, peers, max_ktx_age_us=None):
    """Reasons the given peers (dicts: peer, local_address, interface, multihop) are not offloaded."""
    reasons = []
    for p in peers:
        s = find_session(stats, p["peer"], p.get("local_address"), p.get("interface"), p.get("multihop"))
        label = p["peer"] + (" on %s" % p["interface"] if p.get("interface") else "")
        if s is None:
            reasons.append("peer %s has no session in the engine" % label)
        elif s.get("state") != "up":
            reasons.append("peer %s: the engine's session is %s" % (label, s.get("state")))
        # an Up session's kernel TX is already judged by evaluate()
    return reasons


def link_clock(session):
    """Who clocks one session's packets: ``kernel`` (the kernel's transmit clock runs for it),
    ``peer-clocked`` (XDP answers the peer's packets) or ``userspace``.

    ``kernel_clock`` is absent from engines before the kernel transmit clock: then the fast
    path's ``kernel_tx_active`` alone says whether XDP answers.
    """
    if session.get("kernel_clock"):
        return "kernel"
    return "peer-clocked" if session.get("kernel_tx_active") else "userspace"


def links(stats):
    """One line per engine session: its name, its state and who clocks it (:func:`link_clock`)."""
    return [
        {"session": session_name(s), "state": s.get("state"), "clock": link_clock(s)}
        for s in (stats or {}).get("sessions") or []
        if isinstance(s, dict)
    ]


def _frr_view(status):
    """bfdd's state of one peer, with how long it has been so and its diagnostic when FRR says."""
    text = "%s in FRR" % status.get("status")
    if isinstance(status.get("downtime"), int):
        text += " for %d s" % status["downtime"]
    if status.get("diagnostic") not in (None, "ok"):
        text += " (diagnostic: %s)" % status["diagnostic"]
    return text


def _engine_up_view(session, generated_at):
    """The engine's Up session as a peer's reason shows it: for how long, and its flaps."""
    since = session.get("up_since")
    held = ""
    if isinstance(since, (int, float)) and isinstance(generated_at, (int, float)):
        held = " for %.1f s" % max(0.0, generated_at - since)
    return "the engine's session is up%s with %s flaps" % (held, session.get("flaps", "?"))


def frr_peers_verdict(stats, statuses, max_ktx_age_us=None):
    """(summary, reasons) for the peers bfdd is configured with (``show bfd peers json``).

    A peer not shut down counts as offloaded when FRR has it Up and the engine has an Up
    session for it that the kernel answers; every other one is named in the one reason.
    The engine's own counts cannot see a peer bfdd never handed to it (a mistyped interface).
    """
    configured = [st for st in statuses if st.get("status") != "shutdown"]
    up = offloaded = 0
    bad = []
    for st in configured:
        label = "%s%s%s%s" % (
            st.get("peer"),
            " local %s" % st["local"] if st.get("local") else "",
            " on %s" % st["interface"] if st.get("interface") else "",
            " (multihop)" if st.get("multihop") else "",
        )
        problems = []
        if st.get("status") == "up":
            up += 1
        else:
            problems.append(_frr_view(st))
        s = find_session(stats, st.get("peer"), st.get("local"), st.get("interface"), st.get("multihop"))
        if s is None:
            problems.append("no session in the engine")
        elif s.get("state") != "up":
            problems.append("the engine's session is %s" % s.get("state"))
        elif session_reasons(s, max_ktx_age_us):
            problems.append("not answered by the kernel")
        elif problems:
            # FRR and the engine disagree: a transition between the dump and the vtysh read, or
            # bfdd behind on the engine's notifications. How long the engine has held it Up,
            # and its flaps, tell the two apart.
            problems.append(_engine_up_view(s, stats.get("generated_at")))
        if problems:
            bad.append("%s: %s" % (label, ", ".join(problems)))
        else:
            offloaded += 1
    summary = {"configured": len(configured), "up": up, "offloaded": offloaded}
    if not bad:
        return summary, []
    return summary, [
        "%d of %d BFD peers configured in FRR are not Up and offloaded: %s"
        % (len(bad), len(configured), "; ".join(bad))
    ]


def read_frr_peers(module, vtysh_socket=None):
    """(``show bfd peers json`` as a list, error); (None, None) when there is no vtysh."""
    vtysh = module.get_bin_path("vtysh")
    if not vtysh:
        return None, None
    argv = frr_bfd.vtysh_argv(vtysh, vtysh_socket, ["show bfd peers json"])
    rc, out, err = module.run_command(argv)
    if rc != 0:
        return None, "cannot read bfdd's peers (vtysh rc %d): %s" % (rc, frr_bfd.condense(err + "\n" + out) or "no output")
    try:
        return frr_bfd.parse_peers_json(out), None
    except frr_bfd.BfdConfigError as e:
        return None, "cannot read bfdd's peers: %s" % e


def read_stats(path):
    """(document, error): the stats JSON at ``path``; never raises for a missing or bad file."""
    try:
        with open(path) as f:
            text = f.read()
    except (IOError, OSError) as e:
        return None, "cannot read %s: %s" % (path, e.strerror or e)
    try:
        doc = json.loads(text)
    except ValueError as e:
        return None, "%s is not valid JSON: %s" % (path, e)
    if not isinstance(doc, dict):
        return None, "%s does not hold a JSON object" % path
    return doc, None


def read_pidfile(pidfile):
    """(pid as text, error)."""
    try:
        with open(pidfile) as f:
            pid = f.read().strip()
    except (IOError, OSError) as e:
        return None, "cannot read pidfile %s: %s" % (pidfile, e.strerror or e)
    if not pid.isdigit() or int(pid) <= 0:
        return None, "pidfile %s does not hold a process id: %r" % (pidfile, pid[:40])
    return pid, None


def signal_engine(module, pidfile=None, process_name=DEFAULT_PROCESS_NAME):
    """Send SIGUSR1 to the engine. Returns (signal_time, argv, error)."""
    if pidfile:
        pid, error = read_pidfile(pidfile)
        if error:
            return None, None, error
        argv = [module.get_bin_path("kill", required=True), "-USR1", pid]
    else:
        argv = [module.get_bin_path("pkill", required=True), "-USR1", "-x", process_name]
    signal_time = _clock()
    rc, out, err = module.run_command(argv)
    if rc != 0:
        if pidfile:
            why = (err or out).strip() or "rc %d" % rc
            return None, argv, "cannot signal pid %s from %s: %s" % (pid, pidfile, why)
        if rc == 1:
            return None, argv, "no process named %s is running" % process_name
        return None, argv, "pkill failed (rc %d): %s" % (rc, (err or out).strip())
    return signal_time, argv, None


def stats_location(path=None, pidfile=None, process_name=DEFAULT_PROCESS_NAME):
    """(path as the engine names it, path to read, where it came from, error).

    ``path`` given: that. Otherwise found from the running engine (module_utils/locate.py):
    the pid file's engine, or the one process named ``process_name``.
    """
    if path:
        return path, path, "path", None
    pid = read_pidfile(pidfile)[0] if pidfile else None
    if pidfile and pid is None:
        pids = []  # the signal will say why; show engine.conf's last dump, if any
    else:
        pids = locate.engine_pids(pid, process_name)
    found = locate.discover(pids, process_name)
    return found["path"], found["read_path"], found["source"], found["error"]


def collect(module, path=None, pidfile=None, process_name=DEFAULT_PROCESS_NAME,
            timeout=5.0, max_ktx_age_us=None, min_sessions=1, frr_peers="never", vtysh_socket=None):
    """Signal the engine, wait (bounded) for stats written after the signal, judge them.

    ``path`` None: the stats path is found from the running engine (:func:`stats_location`).
    ``frr_peers``: ``always`` also judges bfdd's configured peers (:func:`frr_peers_verdict`),
    ``auto`` does when the engine has a dataplane and vtysh is installed, ``never`` does not.
    Returns a dict: stats, offload_live, reasons, signaled, signal_command, waited,
    stats_path, stats_path_from, frr_peers (the summary, or None when not judged), links
    (:func:`links`).
    """
    result = {"stats": None, "offload_live": False, "reasons": [], "signaled": False,
              "signal_command": None, "waited": 0.0, "frr_peers": None, "links": []}
    stats_path, path, result["stats_path_from"], error = stats_location(path, pidfile, process_name)
    result["stats_path"] = stats_path
    if error:
        result["reasons"].append(error)
        return result
    signal_time, argv, error = signal_engine(module, pidfile, process_name)
    result["signal_command"] = argv
    if error:
        result["reasons"].append(error)
        # Still show what the last dump said, for the operator; it cannot prove liveness.
        result["stats"] = read_stats(path)[0]
        return result
    result["signaled"] = True
    start = _clock()
    deadline = start + float(timeout)
    doc, read_error = None, None
    while True:
        doc, read_error = read_stats(path)
        fresh = (
            doc is not None
            and isinstance(doc.get("generated_at"), (int, float))
            and doc["generated_at"] + GENERATED_AT_SLACK_S >= signal_time
        )
        if fresh or _clock() >= deadline:
            break
        _sleep(POLL_INTERVAL_S)
    result["waited"] = round(_clock() - start, 3)
    result["stats"] = doc
    if doc is None:
        result["reasons"].append("%s (waited %.1f s after the signal)" % (read_error, float(timeout)))
        return result
    live, reasons = evaluate(doc, signal_time, max_ktx_age_us, min_sessions)
    result["links"] = links(doc)
    if frr_peers == "always" or (frr_peers == "auto" and doc.get("dplane") is not None):
        statuses, error = read_frr_peers(module, vtysh_socket)
        if error:
            reasons.append(error)
        elif statuses is not None:
            result["frr_peers"], more = frr_peers_verdict(doc, statuses, max_ktx_age_us)
            reasons.extend(more)
        elif frr_peers == "always":
            reasons.append("vtysh is not installed: bfdd's peers cannot be read")
    result["offload_live"] = not reasons
    result["reasons"] = reasons
    return result
