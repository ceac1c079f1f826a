"""Why bubblewrap cannot start the grading sandbox here, named with its fix: what containers and hosts block.

bubblewrap needs to create namespaces and mount a fresh /proc. A grader in a container or a pod meets four
things that stop it (containers/bubblewrap#505, #284, #632), each seen in /proc:
- seccomp: Docker's and containerd's default profiles refuse unshare and clone with namespace flags to a
  process without CAP_SYS_ADMIN (/proc/self/status: `Seccomp: 2`);
- AppArmor: Ubuntu 23.10 and later refuse unprivileged user namespaces to programs without a profile that
  allows them (/proc/sys/kernel/apparmor_restrict_unprivileged_userns = 1), and a container's profile such as
  docker-default refuses mount (/proc/self/attr/current names a profile in enforce mode);
- user namespaces switched off: /proc/sys/user/max_user_namespaces = 0, or Debian's
  /proc/sys/kernel/unprivileged_userns_clone = 0;
- /proc masking: container runtimes mount over parts of /proc (/proc/kcore, /proc/sys, ...), and the kernel
  then refuses a new /proc in a user namespace (/proc/self/mountinfo lists mounts inside /proc).
A grader run as root in a container also lacks CAP_SYS_ADMIN, which bubblewrap needs as root. `diagnose`
names every cause it finds (bubblewrap's own message decides between them when several hold), each with its
fix; sandbox.why_unavailable reports it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Facts", "read_facts", "causes", "diagnose"]

CAP_SYS_ADMIN = 21  # its bit in /proc/self/status's CapEff
# Mounts inside /proc that hide nothing (an empty procfs directory): the kernel still allows a new /proc.
HARMLESS_PROC_MOUNTS = ("/proc/sys/fs/binfmt_misc",)


@dataclass(frozen=True)
class Facts:
    """What /proc says about this process's right to make namespaces and mount /proc."""

    as_root: bool
    cap_sys_admin: bool
    seccomp_filtered: bool
    apparmor_profile: str  # the confining profile ('unconfined' when none)
    apparmor_restricts_userns: bool
    max_user_namespaces: int | None
    unprivileged_userns_clone: int | None
    masked_proc_paths: tuple[str, ...]


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _number(path: Path) -> int | None:
    text = (_read(path) or "").strip()
    return int(text) if text.lstrip("-").isdigit() else None


def read_facts(proc: Path = Path("/proc"), euid: int | None = None) -> Facts:
    """The facts, read from proc (default: this machine's /proc) as seen by this process (euid: its uid)."""
    status = _read(proc / "self" / "status") or ""
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    cap_eff = int(fields.get("CapEff", "0").strip() or "0", 16)
    profile = (_read(proc / "self" / "attr" / "current") or "unconfined").strip().rstrip("\x00")
    masked = []
    for line in (_read(proc / "self" / "mountinfo") or "").splitlines():
        parts = line.split()
        if len(parts) > 4 and parts[4].startswith("/proc/") and parts[4] not in HARMLESS_PROC_MOUNTS:
            masked.append(parts[4])
    return Facts(
        as_root=(os.geteuid() if euid is None else euid) == 0,
        cap_sys_admin=bool(cap_eff >> CAP_SYS_ADMIN & 1),
        seccomp_filtered=fields.get("Seccomp", "0").strip() == "2",
        apparmor_profile=profile,
        apparmor_restricts_userns=_number(proc / "sys/kernel/apparmor_restrict_unprivileged_userns") == 1,
        max_user_namespaces=_number(proc / "sys" / "user" / "max_user_namespaces"),
        unprivileged_userns_clone=_number(proc / "sys" / "kernel" / "unprivileged_userns_clone"),
        masked_proc_paths=tuple(masked))


NAMESPACE_REFUSED = re.compile(r"creat\w* new namespace|unshare|clone|uid map|No permissions", re.I)
PROC_REFUSED = re.compile(r"mount proc|/proc", re.I)
MOUNT_REFUSED = re.compile(r"mount|Permission denied", re.I)


def causes(facts: Facts, message: str = "") -> list[str]:
    """Each thing that stops bubblewrap here, with its fix (first: what blocks first); message: bubblewrap's
    error, which decides between causes when several hold."""
    if facts.as_root and not facts.cap_sys_admin:
        return ["CAP_SYS_ADMIN: grading as root needs it, and a container drops it. Run the grader as an "
                "unprivileged user in the container (the course's grader image does), so that bubblewrap "
                "uses a user namespace instead"]
    found = []
    if not facts.as_root:
        if facts.max_user_namespaces == 0:
            found.append("user namespaces: they are switched off (user.max_user_namespaces = 0). Fix on the "
                         "host (a pod's node): sysctl -w user.max_user_namespaces=15000")
        if facts.unprivileged_userns_clone == 0:
            found.append("user namespaces: unprivileged ones are switched off "
                         "(kernel.unprivileged_userns_clone = 0). Fix on the host: "
                         "sysctl -w kernel.unprivileged_userns_clone=1")
        if facts.apparmor_restricts_userns:
            found.append("AppArmor: it refuses unprivileged user namespaces "
                         "(kernel.apparmor_restrict_unprivileged_userns = 1, Ubuntu 23.10 and later). Fix on "
                         "the host: give bwrap a profile that allows them (/etc/apparmor.d/bwrap: "
                         "`abi <abi/4.0>, include <tunables/global> profile bwrap /usr/bin/bwrap "
                         "flags=(unconfined) { userns, }`, then apparmor_parser -r /etc/apparmor.d/bwrap)")
    if facts.seccomp_filtered and (NAMESPACE_REFUSED.search(message) or not message):
        found.append("seccomp: this process runs under a seccomp filter, and container runtimes' default "
                     "profiles refuse unshare and clone with namespace flags. Fix: a profile that allows "
                     "them (docker run --security-opt seccomp=unconfined, or a profile of your own; "
                     "Kubernetes: securityContext.seccompProfile type Unconfined, or Localhost with such a "
                     "profile)")
    if facts.masked_proc_paths and (PROC_REFUSED.search(message) or not message):
        shown = ", ".join(facts.masked_proc_paths[:3]) + (" ..." if len(facts.masked_proc_paths) > 3 else "")
        found.append(f"/proc masking: parts of /proc are mounted over ({shown}), so the kernel refuses "
                     "bubblewrap a new /proc. Fix: Kubernetes securityContext.procMount: Unmasked (with "
                     "hostUsers: false); Docker: --security-opt systempaths=unconfined")
    confined = facts.apparmor_profile not in ("unconfined", "") and "(enforce)" in facts.apparmor_profile
    if confined and (MOUNT_REFUSED.search(message) or not message):
        found.append(f"AppArmor: this process is confined by the profile {facts.apparmor_profile}, which "
                     "refuses mount. Fix: docker run --security-opt apparmor=unconfined; Kubernetes: "
                     "securityContext.appArmorProfile type Unconfined")
    return found


def diagnose(message: str, facts: Facts | None = None) -> str:
    """Why bubblewrap failed with message (its stderr), naming every cause found, each with its fix."""
    facts = read_facts() if facts is None else facts
    message = message.strip()
    found = causes(facts, message)
    said = f"bubblewrap could not start a sandbox ({message[:200]})" if message else \
        "bubblewrap could not start a sandbox"
    if not found:
        return (f"{said}; nothing in /proc names why (seccomp, AppArmor, user namespaces and /proc masking "
                "look allowed): see bubblewrap's message, and run `python -m hwopt.course.grading sandbox` "
                "on this machine")
    return f"{said}. What stops it: " + " | ".join(found)
