"""The grading sandbox: each grading kernel runs under bubblewrap (Linux), seeing its own folder only.

Inside: no network (its own network namespace), its own PID namespace (it can neither see nor signal the
grader or other kernels), the Python environment read-only, the toolkit as grading.toolkit shows it (its
tables, none of its cost models), and its submission folder read-only at kernel.SUBMISSION, which the launcher
copies into its working folder /tmp/<assignment>. /tmp is a tmpfs of the SCRATCH_MB setting: the folder's copy
and any file the kernel writes share it, in memory, thrown away with the sandbox. source/, the gradebook,
other submissions, the instructor secret and the home directory are not there. The kernel's stdin, stdout
and stderr are /dev/null: it talks to the grader only through its Jupyter sockets, never into the grader's
log. Run as root, the sandbox drops to an unprivileged uid first, so
that the process limit holds (Linux does not count root's processes). Each grading process has a uid of its
own (sandbox_uid): Linux counts that limit per uid, so parallel graders sharing one (``nobody``) would let a
fork bomb in one submission starve the kernels of every other grader.

The kernel talks to the grader over Unix sockets (jupyter_client's ipc transport) in a directory of its own,
shared with the grader and no other kernel; grading as root, the kernel may create files there only until its
sockets are bound (seal_run_dir). Where no sandbox can start (macOS, Windows, no bubblewrap, no
user namespaces), starting a kernel fails with a message naming what is missing, unless the instructor
allows unsandboxed grading explicitly (the UNSANDBOXED setting); the grading report then says so.
"""

from __future__ import annotations

import functools
import math
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from queue import Empty

from hwopt.course.grading import kernel, sandbox_diagnosis, settings, toolkit

# Sandbox uids as root: SANDBOX_UID_BASE + the grading process's pid, one uid (and gid) per live grading
# process, with no account. 0x70000000.. is a range that neither distributions nor systemd allocate
# (systemd's UIDS-GIDS.md: unused); adding a pid (at most 2**22, the kernel's pid_max limit) stays inside it.
SANDBOX_UID_BASE = 0x70000000
# Variables the kernel inherits (everything else, the instructor secret included, stays outside): the
# kernel's own settings (limits; threads, from which the launcher sets OMP_NUM_THREADS and the like).
KEPT_ENV = ("LANG", "LC_ALL", "TZ", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
            "PYTHONWARNINGS", "MPLBACKEND",  # from the kernelspec
            *(s.name for s in settings.KERNEL_SETTINGS))
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "fonts", "localtime", "passwd", "group",
             "nsswitch.conf", "mime.types", "ssl/openssl.cnf")
INSTALL_HINT = "install it (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)"


class SandboxUnavailable(RuntimeError):
    """No sandbox can start here, and unsandboxed grading was not allowed."""


def unsandboxed_allowed(environ=os.environ) -> bool:
    """True when the instructor asked to grade without a sandbox (the UNSANDBOXED setting)."""
    return settings.flag(settings.UNSANDBOXED, environ)


def system_mounts() -> list[str]:
    """bwrap arguments for the read-only system: /usr and its /bin, /lib... links, a few files of /etc."""
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for name in ETC_FILES:
        if os.path.exists(f"/etc/{name}"):
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    return args


@functools.lru_cache(maxsize=1)
def installed_toolkit() -> Path:
    """The hwopt package this interpreter imports from a neutral folder (what the kernel will import)."""
    out = subprocess.run([sys.executable, "-c", "import hwopt; print(hwopt.__file__)"], cwd="/",
                         capture_output=True, text=True, timeout=60)
    return Path(out.stdout.strip()).resolve().parent if out.returncode == 0 else Path(__file__).parents[2]


def environment_paths() -> list[Path]:
    """What the kernel must read: the interpreter, the environment's packages, the toolkit (data included)."""
    paths = {Path(p).resolve() for p in (sys.base_prefix, sys.prefix, sys.base_exec_prefix, sys.exec_prefix)}
    paths |= {Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib", "stdlib")}
    paths.add(Path(sys.executable).resolve().parent)
    package = installed_toolkit()
    paths.add(package)
    # A path inside another one is covered by it; /usr is bound already.
    return sorted(p for p in paths if p.exists() and not any(q != p and q in p.parents for q in paths)
                  and Path("/usr") not in [p, *p.parents])


def sandbox_uid(pid: int | None = None) -> int:
    """The uid (and gid) the kernels of grading process pid (default: this one) run as, grading as root."""
    pid = os.getpid() if pid is None else pid
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid <= 2**22:
        raise ValueError(f"pid must be a process id from 1 to 2**22 (pid_max's limit); got {pid!r}")
    return SANDBOX_UID_BASE + pid


def working_folder(cwd: Path) -> Path:
    """Where a kernel started in cwd (its submission folder on the host) works inside the sandbox."""
    return Path("/tmp") / Path(cwd).name


def bwrap_argv(kernel_argv: list[str], *, run_dir: Path, work_dir: Path, cwd: Path,
               environ: dict[str, str], uid: int | None = None, toolkit_view: Path | None = None,
               scratch_mb: float | None = None) -> list[str]:
    """The command that runs kernel_argv sandboxed, in working_folder(cwd), with work_dir (the submission)
    read-only at kernel.SUBMISSION.

    /tmp is a tmpfs of scratch_mb MiB (default: the SCRATCH_MB setting); toolkit_view (grading.toolkit) is
    what the kernel sees at the toolkit's path (None: the toolkit itself). As root the kernel runs as uid
    (default: sandbox_uid()); as a user, bubblewrap's user namespace gives each sandbox its own count of
    processes already, and uid is not used.
    """
    as_root = os.geteuid() == 0  # root mounts, then drops to uid; a user needs a user namespace
    scratch_mb = settings.positive_number(settings.SCRATCH_MB, environ) if scratch_mb is None else scratch_mb
    unshare = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    argv = ["bwrap", *(unshare if as_root else ["--unshare-all"]), "--die-with-parent", "--new-session",
            "--hostname", "grader", *system_mounts(), "--proc", "/proc", "--dev", "/dev",
            "--perms", "1777", "--size", str(int(scratch_mb * 2**20)), "--tmpfs", "/tmp"]
    bound = environment_paths()
    folder = working_folder(cwd)
    parents = {p for path in [*bound, run_dir, Path(kernel.SUBMISSION)] for p in path.parents} - {Path("/"),
                                                                                          Path("/tmp")}
    for parent in sorted(parents):
        argv += ["--perms", "0755", "--dir", str(parent)]  # traversable by the sandbox's uid, unlike /root
    for path in bound:
        argv += ["--ro-bind", str(path), str(path)]
    if toolkit_view is not None:
        argv += ["--ro-bind", str(toolkit_view), str(installed_toolkit())]
    argv += ["--bind", str(run_dir), str(run_dir), "--ro-bind", str(work_dir), kernel.SUBMISSION,
             "--perms", "0777", "--dir", str(folder), "--chdir", str(folder), "--clearenv"]
    for name, value in sandbox_environment(environ).items():
        argv += ["--setenv", name, value]
    if as_root:
        uid = sandbox_uid() if uid is None else uid
        kernel_argv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                       "--inh-caps=-all", "--bounding-set=-all", "--", *kernel_argv]
    return [*argv, "--", *kernel_argv]


def sandbox_environment(environ: dict[str, str]) -> dict[str, str]:
    """The kernel's environment: a PATH to this interpreter, a scratch HOME, and the KEPT_ENV variables."""
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp",
           "PYTHONNOUSERSITE": "1", "LANG": "C.UTF-8",
           "USER": "grader", "LOGNAME": "grader"}  # the uid has no account: getpass.getuser() reads these
    env.update({k: environ[k] for k in KEPT_ENV if k in environ})
    return env


@functools.lru_cache(maxsize=1)
def why_unavailable() -> str | None:
    """Why no sandbox can start on this machine (a message naming what is missing), or None if one can."""
    if sys.platform != "linux":
        return f"the grading sandbox needs Linux (bubblewrap); this is {sys.platform}"
    if shutil.which("bwrap") is None:
        return f"the grading sandbox needs bubblewrap (bwrap), which is not installed: {INSTALL_HINT}"
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        return "grading as root needs setpriv (util-linux) to drop to an unprivileged uid"
    with tempfile.TemporaryDirectory() as scratch:
        os.chmod(scratch, 0o777)
        probe = bwrap_argv(["/bin/true"], run_dir=Path(scratch), work_dir=Path(scratch), cwd=Path(scratch),
                           environ={})
        try:
            out = subprocess.run(probe, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"bubblewrap could not start a sandbox ({err})"
    if out.returncode != 0:
        return sandbox_diagnosis.diagnose(out.stderr)  # names seccomp, AppArmor, user namespaces, /proc masks
    return None


def hand_to_sandbox_user(run_dir: Path, uid: int | None = None) -> None:
    """Give run_dir (connection file, sockets) to uid (default: sandbox_uid()) when root: the kernel binds its
    sockets there."""
    if os.geteuid() != 0:
        return
    uid = sandbox_uid() if uid is None else uid
    for root, dirs, files in os.walk(run_dir):
        for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
            os.lchown(name, uid, uid)


def seal_run_dir(run_dir: Path) -> None:
    """Once a kernel has bound its sockets: run_dir back to root (when root), so that the kernel can create no
    file in it (the sockets it made stay usable). A user's kernel has the user's own uid: nothing to do."""
    if os.geteuid() == 0 and run_dir is not None:
        os.chown(run_dir, 0, 0)
        os.chmod(run_dir, 0o755)


# ---- the kernel manager nbclient uses for grading (JudgedExecute selects it) ---------------------------

import zmq.asyncio  # noqa: E402
from jupyter_client.asynchronous import AsyncKernelClient  # noqa: E402
from jupyter_client.manager import AsyncKernelManager  # noqa: E402
from traitlets import Bool, Integer, Type, default  # noqa: E402

IOPUB_CONNECTED_S = 0.2  # after the kernel_info reply: how long a client waits for IOPub's first message
RECONNECT_S = 0.01  # how often a client's socket tries again to reach a kernel still starting (zmq: 0.1 s)
EXIT_POLL_S = 0.005  # how often the manager looks whether a killed kernel is gone (jupyter_client: 0.1 s)


class PromptKernelClient(AsyncKernelClient):
    """jupyter_client's client, ready as soon as the kernel has answered on shell and IOPub is connected.

    jupyter_client's wait_for_ready then reads IOPub until it has been silent for 0.2 s: a fixed 0.2 s, with
    no core working, for every kernel a grader starts. Nothing needs that flush: nbclient reads only the
    IOPub messages whose parent is one of its own requests. Its sockets connect before the kernel has bound
    its own, and zmq tries again only every 0.1 s: a kernel that has started waited up to that long for its
    first request, and again for IOPub, with no core working.
    """

    def _context_default(self) -> zmq.asyncio.Context:
        context = super()._context_default()  # the client's own (it never takes one passed in here)
        context.setsockopt(zmq.RECONNECT_IVL, round(RECONNECT_S * 1000))  # for every socket it makes
        return context

    async def _async_wait_for_ready(self, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (math.inf if timeout is None else timeout)
        while True:
            self.kernel_info()
            try:
                reply = await self.shell_channel.get_msg(timeout=1)
            except Empty:
                reply = None
            if reply is not None and reply["msg_type"] == "kernel_info_reply":
                try:
                    await self.iopub_channel.get_msg(timeout=IOPUB_CONNECTED_S)  # any: IOPub is connected
                except Empty:
                    pass  # IOPub is not connected yet: ask again
                else:
                    self._handle_kernel_info_reply(reply)
                    return
            if not await self._async_is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout:g} seconds")

    wait_for_ready = _async_wait_for_ready  # AsyncKernelClient binds jupyter_client's coroutine to this name


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel manager whose kernels run in the sandbox, talking over Unix sockets in a private directory."""

    allow_unsandboxed = Bool(help=f"Grade without a sandbox where none can start (also "
                             f"{settings.UNSANDBOXED.name}=1); the grading report flags every notebook "
                             "graded so.").tag(config=True)

    uid = Integer(None, allow_none=True, help="The uid (and gid) the kernel runs as when grading as root "
                  "(default: sandbox_uid(), this grading process's own)").tag(config=True)

    @default("allow_unsandboxed")
    def _allow_unsandboxed_default(self) -> bool:
        return unsandboxed_allowed()

    client_factory = Type(PromptKernelClient, klass=AsyncKernelClient, config=True)

    @default("transport")
    def _transport_default(self) -> str:
        return "tcp" if sys.platform == "win32" else "ipc"  # Windows: no Unix sockets (unsandboxed only)

    run_dir: Path | None = None
    sandboxed: bool | None = None

    async def _async_pre_start_kernel(self, **kw):
        if self.run_dir is None:  # a restart keeps its directory (and the connection file's sockets)
            self.run_dir = Path(tempfile.mkdtemp(prefix="hwopt-kernel-"))
            self.connection_file = str(self.run_dir / "connection.json")
            if self.transport == "ipc":
                self.ip = str(self.run_dir / "kernel")
        try:
            return await super()._async_pre_start_kernel(**kw)
        except BaseException:
            shutil.rmtree(self.run_dir, ignore_errors=True)
            self.run_dir = None
            raise

    def format_kernel_cmd(self, extra_arguments=None) -> list[str]:
        cmd = super().format_kernel_cmd(extra_arguments)
        reason = why_unavailable()
        if reason and not self.allow_unsandboxed:
            raise SandboxUnavailable(f"{reason}. To grade without a sandbox anyway (student code then runs "
                                     f"with your rights), set {settings.UNSANDBOXED.name}=1.")
        self.sandboxed = reason is None
        if not self.sandboxed:
            self.log.warning("Grading WITHOUT a sandbox: %s", reason)
            return cmd
        cwd = Path(self._launch_args.get("cwd") or os.getcwd()).resolve()
        hand_to_sandbox_user(self.run_dir, self.uid)  # again on a restart: the kernel binds its sockets anew
        env = {**os.environ, **(self._launch_args.get("env") or {}), **(self.kernel_spec.env or {})}
        return bwrap_argv(cmd, run_dir=self.run_dir, work_dir=cwd, cwd=cwd, environ=env, uid=self.uid,
                          toolkit_view=toolkit.view(installed_toolkit()))

    async def _async_launch_kernel(self, kernel_cmd: list[str], **kw) -> None:
        # The kernel's standard streams are /dev/null: it cannot read, flood or forge the grader's log.
        kw.update(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        await super()._async_launch_kernel(kernel_cmd, **kw)

    def seal_run_dir(self) -> None:
        """Once the kernel answers (its sockets bound): it can create no more files in its run_dir."""
        if self.sandboxed:
            seal_run_dir(self.run_dir)

    async def _async_wait(self, pollinterval: float = 0.1) -> None:
        # Until a kernel it killed is gone, jupyter_client sleeps in steps of 0.1 s; the sandbox goes in ms.
        await super()._async_wait(pollinterval=min(pollinterval, EXIT_POLL_S))

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        if not restart and self.run_dir is not None:
            shutil.rmtree(self.run_dir, ignore_errors=True)
            self.run_dir = None

    # AsyncKernelManager binds the base class's coroutine to this name: without this, nbclient's clean-up of
    # a kernel that died at start would skip the override above and leave run_dir behind.
    cleanup_resources = _async_cleanup_resources
