"""course.grading.sandbox_diagnosis: each cause that stops bubblewrap named, with its fix.

Four causes are made for real on this machine and bubblewrap itself fails under each: a grader as root
without CAP_SYS_ADMIN (setpriv drops it, as a container does), a seccomp filter that refuses namespaces
(Docker's rule for clone and unshare, loaded through libseccomp), /proc masked (a file bound over
/proc/keys in a private mount namespace, as container runtimes do), and user namespaces switched off (a user
namespace whose user.max_user_namespaces is 0). bubblewrap runs as an unprivileged user in the last three, as
in the course's grader image. AppArmor cannot be switched on here (no AppArmor in this kernel): its two
causes are read from /proc trees written as an Ubuntu 24.04 host and a Docker container show them, with the
message bubblewrap prints there (containers/bubblewrap#632).
"""

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from hwopt.course.grading.sandbox_diagnosis import Facts, causes, diagnose, read_facts
from tests.support import skip_outside_ci

ALLOWED = Facts(as_root=False, cap_sys_admin=False, seccomp_filtered=False, apparmor_profile="unconfined",
                apparmor_restricts_userns=False, max_user_namespaces=15000, unprivileged_userns_clone=None,
                masked_proc_paths=())
NOBODY = 65534

# A child that makes one cause real, reads /proc under it, and runs bubblewrap there; prints both as JSON.
CHILD = r"""
import ctypes, json, os, subprocess, sys
from dataclasses import asdict
from hwopt.course.grading import sandbox, sandbox_diagnosis

cause = sys.argv[1]
UNPRIVILEGED = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
PROBE = ["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc",
         "--dev", "/dev", "/bin/true"]

def report(argv):
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    print(json.dumps({"facts": asdict(sandbox_diagnosis.read_facts()), "returncode": out.returncode,
                      "stderr": out.stderr}))

if cause == "cap_sys_admin":  # started without CAP_SYS_ADMIN: the sandbox's own start-up check
    print(json.dumps({"facts": asdict(sandbox_diagnosis.read_facts()), "why": sandbox.why_unavailable()}))
elif cause == "seccomp":  # Docker's default profile: no unshare, no clone with namespace flags
    lib = ctypes.CDLL("libseccomp.so.2")
    lib.seccomp_init.restype = ctypes.c_void_p
    ctx = ctypes.c_void_p(lib.seccomp_init(0x7FFF0000))  # SCMP_ACT_ALLOW
    refuse = 0x00050000 | 1  # SCMP_ACT_ERRNO(EPERM)

    class Cmp(ctypes.Structure):
        _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("a", ctypes.c_uint64),
                    ("b", ctypes.c_uint64)]

    def nr(name):
        return lib.seccomp_syscall_resolve_name(name.encode())

    assert lib.seccomp_rule_add(ctx, refuse, nr("unshare"), 0) == 0
    assert lib.seccomp_rule_add(ctx, 0x00050000 | 38, nr("clone3"), 0) == 0  # ENOSYS: libc falls back
    for flag in (0x00020000, 0x10000000, 0x20000000, 0x40000000):  # NEWNS, NEWUSER, NEWPID, NEWNET
        rule = Cmp(0, 7, flag, flag)  # SCMP_CMP_MASKED_EQ: (flags & flag) == flag
        assert lib.seccomp_rule_add_array(ctx, refuse, nr("clone"), 1, ctypes.byref(rule)) == 0
    assert lib.seccomp_load(ctx) == 0
    report(UNPRIVILEGED + PROBE)
elif cause == "proc_masking":  # run in a private mount namespace: mask a part of /proc as runtimes do
    subprocess.run(["mount", "--bind", "/dev/null", "/proc/keys"], check=True)
    report(UNPRIVILEGED + PROBE)
elif cause == "user_namespaces":  # a user namespace (uids mapped 1:1) in which no more may be made
    libc = ctypes.CDLL(None, use_errno=True)
    ready, go = os.pipe(), os.pipe()
    pid = os.fork()
    if pid == 0:
        assert libc.unshare(0x10000000) == 0, os.strerror(ctypes.get_errno())  # CLONE_NEWUSER
        os.write(ready[1], b"1")
        os.read(go[0], 1)
        with open("/proc/sys/user/max_user_namespaces", "w") as f:
            f.write("0")
        report(UNPRIVILEGED + PROBE)
        sys.stdout.flush()
        os._exit(0)
    os.read(ready[0], 1)
    for name in ("uid_map", "gid_map"):
        with open(f"/proc/{pid}/{name}", "w") as f:
            f.write("0 0 65536")
    os.write(go[1], b"1")
    assert os.waitpid(pid, 0)[1] == 0
"""


def made_for_real(cause: str) -> dict:
    """What the child saw with the cause made real: its /proc facts and bubblewrap's failure."""
    if os.geteuid() != 0:
        skip_outside_ci("making each sandbox failure for real needs root (namespaces, mounts, seccomp)")
    for tool in ("bwrap", "setpriv", "unshare", "mount"):
        if shutil.which(tool) is None:
            skip_outside_ci(f"making each sandbox failure for real needs {tool}")
    wrap = {"cap_sys_admin": ["setpriv", "--bounding-set=-sys_admin", "--inh-caps=-sys_admin"],
            "proc_masking": ["unshare", "--mount", "--propagation", "private"]}.get(cause, [])
    out = subprocess.run([*wrap, sys.executable, "-c", CHILD, cause], capture_output=True, text=True,
                         timeout=120, cwd="/")
    if cause == "seccomp" and "libseccomp" in out.stderr:
        skip_outside_ci("the seccomp case needs libseccomp.so.2 (Debian: libseccomp2)")
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    seen["facts"] = Facts(**{k: tuple(v) if isinstance(v, list) else v for k, v in seen["facts"].items()})
    return seen


def as_unprivileged(facts: Facts) -> Facts:
    """The facts as the unprivileged user that ran bubblewrap sees them (the same /proc, other rights)."""
    return replace(facts, as_root=False, cap_sys_admin=False)


def test_grading_as_root_without_cap_sys_admin_is_named_by_the_start_up_check():
    seen = made_for_real("cap_sys_admin")
    assert seen["facts"].as_root and not seen["facts"].cap_sys_admin
    assert "Creating new namespace failed" in seen["why"]
    assert "What stops it: CAP_SYS_ADMIN" in seen["why"] and "unprivileged user" in seen["why"]


def test_a_seccomp_filter_that_refuses_namespaces_is_named_with_its_fix():
    seen = made_for_real("seccomp")
    assert seen["returncode"] != 0 and seen["facts"].seccomp_filtered
    found = causes(as_unprivileged(seen["facts"]), seen["stderr"])
    assert [c.split(":")[0] for c in found] == ["seccomp"], seen["stderr"]
    assert "seccomp=unconfined" in found[0] and "seccompProfile" in found[0]


def test_proc_masking_is_named_with_its_fix():
    seen = made_for_real("proc_masking")
    assert "Can't mount proc" in seen["stderr"], seen["stderr"]
    assert "/proc/keys" in seen["facts"].masked_proc_paths
    message = diagnose(seen["stderr"], as_unprivileged(seen["facts"]))
    assert "What stops it: /proc masking" in message and "/proc/keys" in message
    assert "procMount: Unmasked" in message and "systempaths=unconfined" in message


def test_user_namespaces_switched_off_are_named_with_their_fix():
    seen = made_for_real("user_namespaces")
    assert seen["returncode"] != 0 and seen["facts"].max_user_namespaces == 0, seen["stderr"]
    message = diagnose(seen["stderr"], as_unprivileged(seen["facts"]))
    assert "What stops it: user namespaces: they are switched off" in message
    assert "sysctl -w user.max_user_namespaces=15000" in message


def write_proc(root: Path, *, status: str = "Seccomp:\t0\nCapEff:\t0000000000000000\n",
               attr: str | None = None, restrict_userns: str | None = None, mounts: str = "") -> Path:
    """A /proc tree holding only what read_facts reads."""
    (root / "self" / "attr").mkdir(parents=True)
    (root / "sys" / "kernel").mkdir(parents=True)
    (root / "sys" / "user").mkdir(parents=True)
    (root / "self" / "status").write_text(status)
    (root / "self" / "mountinfo").write_text("22 27 0:21 / /proc rw,relatime - proc proc rw\n" + mounts)
    (root / "sys" / "user" / "max_user_namespaces").write_text("63000\n")
    if attr is not None:
        (root / "self" / "attr" / "current").write_text(attr)
    if restrict_userns is not None:
        (root / "sys" / "kernel" / "apparmor_restrict_unprivileged_userns").write_text(restrict_userns)
    return root


def test_apparmor_restricting_user_namespaces_on_ubuntu_is_named_with_its_fix(tmp_path):
    facts = read_facts(write_proc(tmp_path, restrict_userns="1\n"), euid=1000)
    assert facts.apparmor_restricts_userns and not facts.as_root
    message = diagnose("bwrap: setting up uid map: Permission denied\n", facts)
    assert "What stops it: AppArmor: it refuses unprivileged user namespaces" in message
    assert "/etc/apparmor.d/bwrap" in message and "userns" in message


def test_a_containers_apparmor_profile_refusing_mount_is_named_with_its_fix(tmp_path):
    facts = read_facts(write_proc(tmp_path, attr="docker-default (enforce)\n"), euid=1000)
    assert facts.apparmor_profile == "docker-default (enforce)"
    message = diagnose("bwrap: Failed to make / slave: Permission denied\n", facts)
    assert "What stops it: AppArmor: this process is confined by the profile docker-default" in message
    assert "apparmor=unconfined" in message and "appArmorProfile" in message


def test_unprivileged_user_namespaces_switched_off_on_debian_are_named():
    facts = replace(ALLOWED, unprivileged_userns_clone=0)
    message = diagnose("bwrap: No permissions to creating new namespace, likely because the kernel does not "
                       "allow non-privileged user namespaces.", facts)
    assert "kernel.unprivileged_userns_clone=1" in message


def test_bubblewraps_message_decides_between_causes_that_all_hold(tmp_path):
    mounts = "30 22 0:5 /null /proc/keys rw - devtmpfs udev rw\n31 22 0:30 / /proc/sys/fs/binfmt_misc rw - " \
             "binfmt_misc binfmt_misc rw\n"
    facts = read_facts(write_proc(tmp_path, status="Seccomp:\t2\nCapEff:\t0\n", mounts=mounts), euid=1000)
    assert facts.masked_proc_paths == ("/proc/keys",)  # binfmt_misc hides nothing
    first = [c.split(":")[0] for c in causes(facts, "bwrap: Creating new namespace failed: Operation not "
                                                    "permitted")]
    assert first == ["seccomp"]
    assert [c.split(":")[0] for c in causes(facts, "bwrap: Can't mount proc on /newroot/proc: Operation not "
                                                   "permitted")] == ["/proc masking"]
    assert [c.split(":")[0] for c in causes(facts)] == ["seccomp", "/proc masking"]  # no message: every one


def test_nothing_found_says_so_and_where_to_look():
    message = diagnose("bwrap: something new\n", ALLOWED)
    assert message.startswith("bubblewrap could not start a sandbox (bwrap: something new)")
    assert "nothing in /proc names why" in message


def test_a_machine_where_the_sandbox_starts_shows_no_cause(grading_sandbox):
    assert causes(read_facts(), "") == []  # nothing named where nothing stops bubblewrap
