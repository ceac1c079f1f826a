"""course.grading.sandbox: a grading kernel sees its own folder only, no network, and cannot signal anyone."""

import asyncio
import json
import os
import pwd
import socket
import sys
import time
from pathlib import Path

import pytest
import zmq
from jupyter_client.kernelspec import KernelSpecManager

from hwopt.course.grading import sandbox, settings
from hwopt.course.grading.course import ROOT
from tests.support import skip_outside_ci

UNSANDBOXED, PROCESSES, THREADS = (s.name for s in (settings.UNSANDBOXED, settings.MAX_PROCESSES,
                                                     settings.THREADS))
pytestmark = pytest.mark.slow


class Kernel:
    """A grading kernel started the way autograde starts it, with a helper to run code and read stdout."""

    def __init__(self, cwd: Path, uid: int | None = None, env: dict | None = None):
        ksm = KernelSpecManager(kernel_dirs=[str(ROOT / "autograder" / "kernels")])
        self.km = sandbox.SandboxedKernelManager(kernel_name="hwopt-grader", kernel_spec_manager=ksm, uid=uid)
        self.loop = asyncio.new_event_loop()
        try:
            started = self.km.start_kernel(cwd=str(cwd), env={**os.environ, **(env or {})})
            self.loop.run_until_complete(started)
        except BaseException:
            self.loop.close()
            raise
        self.kc = self.km.client()
        self.kc.start_channels()
        try:
            self.loop.run_until_complete(self.kc.wait_for_ready(timeout=60))
        except BaseException:
            self.close()  # a kernel that died at start still has its folder of sockets: remove it
            raise

    def run(self, code: str) -> str:
        out = []
        hook = lambda msg: out.append(msg["content"].get("text", ""))  # noqa: E731
        reply = self.loop.run_until_complete(self.kc.execute_interactive(code, timeout=60, output_hook=hook))
        assert reply["content"]["status"] == "ok", reply["content"]
        return "".join(out)

    def close(self):
        self.kc.stop_channels()
        self.loop.run_until_complete(self.km.shutdown_kernel(now=True))
        self.loop.close()


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A course folder: instructor files, a gradebook, a classmate's submission, and one student's folder."""
    course = tmp_path_factory.mktemp("course")
    for name in ("source/a/a.ipynb", "gradebook.db", "submitted/grace/a/a.ipynb", "secret"):
        (course / name).parent.mkdir(parents=True, exist_ok=True)
        (course / name).write_text("instructor only")
    mine = course / "autograded" / "ada" / "a"
    mine.mkdir(parents=True)
    (mine / "a.ipynb").write_text("{}")
    return course


@pytest.fixture(scope="module")
def kernel(course, grading_sandbox):
    k = Kernel(course / "autograded" / "ada" / "a", env={settings.SECRET.name: "s3cret",
               settings.SECRET_FILE.name: str(course / "secret"), PROCESSES: "64"})
    yield k
    k.close()


def test_this_machine_can_sandbox(grading_sandbox):
    assert sandbox.why_unavailable() is None  # `make test` installs bubblewrap (elsewhere: skipped)


def test_the_kernel_sees_its_folder_and_none_of_the_course(kernel, course):
    paths = [course / p for p in ("source/a/a.ipynb", "gradebook.db", "submitted/grace/a/a.ipynb", "secret")]
    paths = [str(p) for p in (*paths, ROOT / "source", ROOT / "autograder", Path.home() / ".config")]
    seen = json.loads(kernel.run(f"import json, os\nprint(json.dumps([os.path.exists(p) for p in {paths}]))"))
    assert seen == [False] * len(paths)
    assert kernel.run("import os\nprint(sorted(os.listdir('.')))").strip() == "['a.ipynb']"


def test_what_the_kernel_writes_stays_in_its_private_copy(kernel, course):
    kernel.run("open('planted.txt', 'w').write('x')\nprint(open('planted.txt').read())")
    assert not (course / "autograded" / "ada" / "a" / "planted.txt").exists()


def test_the_kernel_gets_no_secret_and_a_clean_environment(kernel):
    env = json.loads(kernel.run("import json, os\nprint(json.dumps(dict(os.environ)))"))
    assert not any("SECRET" in k for k in env), env
    assert env[PROCESSES] == "64"


def test_the_kernel_has_no_network(kernel):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    try:
        port = server.getsockname()[1]
        got = kernel.run(f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), 3)\n"
                         "    print('connected')\nexcept OSError as err:\n    print(type(err).__name__)")
        assert got.strip() != "connected"
        got = kernel.run("import socket\ntry:\n    socket.getaddrinfo('pypi.org', 443)\n"
                         "    print('resolved')\nexcept OSError as err:\n    print(type(err).__name__)")
        assert got.strip() != "resolved"
    finally:
        server.close()


def test_the_kernel_cannot_see_or_signal_the_grader(kernel):
    me = os.getpid()
    got = kernel.run(f"""import os, signal
pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
print(pids)
for pid, sig in (({me}, 0), (os.getppid(), signal.SIGKILL), (os.getppid(), signal.SIGTERM)):
    try:
        os.kill(pid, sig)
        print('sent')
    except OSError as err:
        print(type(err).__name__)""")
    lines = got.split("\n")
    assert lines[0] == "[1, 2]", "its own PID namespace: the reaper and the kernel only"
    assert lines[1] == "ProcessLookupError", "the grader is not even visible"
    assert all(line in ("PermissionError", "sent") for line in lines[2:4])
    assert kernel.run("print('still alive')").strip() == "still alive"  # and so is this test, the grader


def test_the_kernels_limits_hold_and_cannot_be_raised(kernel):
    got = kernel.run("""import os, resource
print(resource.getrlimit(resource.RLIMIT_NPROC)[1], resource.getrlimit(resource.RLIMIT_AS)[1] // 2**30)
try:
    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    print('raised')
except (ValueError, OSError):
    print('refused')
children = 0
try:
    for _ in range(1000):
        if os.fork() == 0:
            import time; time.sleep(30); os._exit(0)
        children += 1
except OSError:
    pass
print(children)""").split()
    assert got[:3] == ["64", "4", "refused"]
    assert 0 < int(got[3]) < 64, "a fork bomb stops at the process limit"


def test_the_kernel_computes_with_the_graders_thread_setting_not_its_environment(course, grading_sandbox):
    """A Dask worker's environment says one thread, a shell's nothing or anything: kernels do not care."""
    code = ("import json, os, torch\n"
            "print(json.dumps([torch.get_num_threads(), os.environ['OPENBLAS_NUM_THREADS']]))")
    folder = course / "autograded" / "ada" / "a"
    for env, expected in (({"OMP_NUM_THREADS": "2", THREADS: ""}, [1, "1"]),
                          ({"OMP_NUM_THREADS": "1", THREADS: "2"}, [2, "2"])):
        k = Kernel(folder, env=env)
        try:
            assert json.loads(k.run(code)) == expected, env
        finally:
            k.close()


# A student's folder may hold anything, this too: a launcher of the toolkit's name that sets no limits.
UNLIMITED_LAUNCHER = """import sys
from ipykernel import kernelapp
kernelapp.launch_new_instance(["--IPKernelApp.parent_handle=1", *sys.argv[1:]])
"""


def test_a_launcher_in_the_students_folder_is_not_the_one_that_runs(tmp_path, grading_sandbox):
    folder = tmp_path / "a"
    fake = folder / "hwopt" / "course" / "grading"
    fake.mkdir(parents=True)
    for package in (folder / "hwopt", fake.parent, fake):
        (package / "__init__.py").write_text("")
    (fake / "kernel.py").write_text(UNLIMITED_LAUNCHER)
    (folder / "helper.py").write_text("ANSWER = 42\n")
    # a uid of its own: the module's kernel leaves sleeping children that hold its uid's process limit
    kernel = Kernel(folder, uid=sandbox.sandbox_uid(2**22 - 3), env={PROCESSES: "64"})
    try:
        got = kernel.run("import os, resource, sys, helper\n"
                         "print(resource.getrlimit(resource.RLIMIT_NPROC)[1], helper.ANSWER, "
                         "sys.modules['debugpy'], sys.modules['hwopt'].__file__.startswith(os.getcwd()))")
    finally:
        kernel.close()
    nproc, answer, debugpy, toolkit_from_the_folder = got.split()
    assert nproc == "64", "the toolkit's launcher ran and set the limits, not the student's"
    assert answer == "42", "as in any kernel, the student's own modules in their folder import"
    assert debugpy == "None", "the grading kernel has no debugger: its import is blocked"
    assert toolkit_from_the_folder == "False", "the toolkit this kernel imported is the installed one"


FORK_TO_THE_LIMIT = """import os, time
children = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(60); os._exit(0)
        children += 1
except OSError:
    print(children)"""
THREAD_STARTS = "import threading\nt = threading.Thread(target=print, args=('started',))\nt.start(); t.join()"


def kernel_beside_a_fork_bomb(folder: Path, same_uid: bool) -> str:
    """What a second kernel says while a first one's fork bomb holds its uid's process limit."""
    bomb_uid, other_uid = sandbox.sandbox_uid(2**22 - 1), sandbox.sandbox_uid(2**22 - 2)  # above pid_max
    bomb = Kernel(folder, uid=bomb_uid, env={PROCESSES: "64"})
    try:
        assert 0 < int(bomb.run(FORK_TO_THE_LIMIT)) < 64
        try:
            other = Kernel(folder, uid=bomb_uid if same_uid else other_uid, env={PROCESSES: "64"})
        except RuntimeError as err:  # it could not start its threads: it died at start
            return f"died: {err}"
        try:
            return other.run(THREAD_STARTS).strip()
        except AssertionError as err:
            return f"failed: {err}"
        finally:
            other.close()
    finally:
        bomb.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="as a user, each sandbox's user namespace counts its processes")
def test_a_fork_bomb_starves_the_kernels_of_its_own_uid_only(course, grading_sandbox):
    """Grading processes have uids of their own (sandbox_uid): this is what sharing one would cost."""
    folder = course / "autograded" / "ada" / "a"
    assert kernel_beside_a_fork_bomb(folder, same_uid=False) == "started"
    assert kernel_beside_a_fork_bomb(folder, same_uid=True) != "started"


def test_each_grading_process_has_its_own_sandbox_uid():
    assert sandbox.sandbox_uid(100) != sandbox.sandbox_uid(101)
    assert sandbox.sandbox_uid() == sandbox.SANDBOX_UID_BASE + os.getpid()

    with pytest.raises(KeyError):
        pwd.getpwuid(sandbox.sandbox_uid())  # no account has it
    for bad in (0, -1, 2**22 + 1, 1.5, True):
        with pytest.raises(ValueError, match="pid must be"):
            sandbox.sandbox_uid(bad)


def test_cleaning_up_a_kernel_that_died_at_start_removes_its_folder(tmp_path):
    km = sandbox.SandboxedKernelManager(kernel_name="hwopt-grader")
    km.run_dir = tmp_path / "hwopt-kernel-x"
    km.run_dir.mkdir()
    km.connection_file = str(km.run_dir / "connection.json")
    asyncio.run(km.cleanup_resources())  # what nbclient calls when the kernel is no longer alive
    assert not (tmp_path / "hwopt-kernel-x").exists() and km.run_dir is None


def test_no_sandbox_stops_grading_unless_allowed(monkeypatch, course):
    monkeypatch.setattr(sandbox, "why_unavailable", lambda: "bubblewrap is not installed")
    with pytest.raises(sandbox.SandboxUnavailable, match=f"{UNSANDBOXED}=1"):
        Kernel(course)
    monkeypatch.setenv(UNSANDBOXED, "1")
    k = Kernel(course / "autograded" / "ada" / "a")
    try:
        assert k.km.sandboxed is False
        assert k.run("import os\nprint(os.path.exists('../../../gradebook.db'))").strip() == "True"
    finally:
        k.close()


def kernel_manager():
    ksm = KernelSpecManager(kernel_dirs=[str(ROOT / "autograder" / "kernels")])
    return sandbox.SandboxedKernelManager(kernel_name="hwopt-grader", kernel_spec_manager=ksm)


@pytest.mark.parametrize("platform", ["darwin", "win32"])
def test_grading_on_macos_or_windows_refuses_with_the_documented_message(monkeypatch, platform):
    monkeypatch.setattr(sandbox.sys, "platform", platform)
    sandbox.why_unavailable.cache_clear()
    monkeypatch.delenv(UNSANDBOXED, raising=False)
    reason = f"the grading sandbox needs Linux (bubblewrap); this is {platform}"
    try:
        assert sandbox.why_unavailable() == reason
        with pytest.raises(sandbox.SandboxUnavailable) as refused:
            kernel_manager().format_kernel_cmd()
    finally:
        sandbox.why_unavailable.cache_clear()
    assert str(refused.value) == (f"{reason}. To grade without a sandbox anyway (student code then runs with "
                                  f"your rights), set {UNSANDBOXED}=1.")
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "the grading sandbox needs Linux (bubblewrap)" in readme and UNSANDBOXED in readme, (
        "the README's instructors' section documents the refusal")


def test_the_grading_kernelspec_launches_this_environments_interpreter(monkeypatch):
    monkeypatch.setenv(UNSANDBOXED, "1")
    monkeypatch.setattr(sandbox, "why_unavailable", lambda: "no sandbox in this test")
    km = kernel_manager()
    assert km.format_kernel_cmd()[:4] == [sys.executable, "-P", "-m", "hwopt.course.grading.kernel"]
    assert km.transport == "ipc" and km.sandboxed is False
    monkeypatch.setattr(sandbox.sys, "platform", "win32")
    assert kernel_manager().transport == "tcp", "Windows has no Unix sockets: unsandboxed kernels use tcp"


def test_without_a_sandbox_grading_tests_skip_saying_so_but_fail_in_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="needs bubblewrap"):
        skip_outside_ci("needs bubblewrap")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must run this test"):
        skip_outside_ci("needs bubblewrap")


def processes_of(uid: int) -> list[int]:
    """The pids of every process running as uid."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == uid:
                pids.append(int(entry))
        except FileNotFoundError:  # gone meanwhile
            pass
    return pids


@pytest.mark.skipif(os.geteuid() != 0, reason="as a user, the sandbox's processes have the user's own uid")
def test_killing_a_kernel_ends_every_process_of_its_sandbox(course, grading_sandbox):
    """Grading kills each kernel after its last cell (nbgrader_config.py): nothing it started outlives it."""
    uid = sandbox.sandbox_uid(2**22 - 3)
    k = Kernel(course / "autograded" / "ada" / "a", uid=uid)
    try:
        k.run("import os, subprocess, time\nsubprocess.Popen(['sleep', '300'], start_new_session=True)\n"
              "if os.fork() == 0:\n    os.setsid(); time.sleep(300); os._exit(0)")
        assert len(processes_of(uid)) >= 3  # the kernel, its sleep and its fork (and the sandbox's init)
    finally:
        k.close()  # shutdown_kernel(now=True): what nbclient does with shutdown_kernel = "immediate"
    deadline = time.monotonic() + 10
    while processes_of(uid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_of(uid) == []


def test_the_grading_client_is_ready_once_iopub_answers(course, grading_sandbox):
    """Ready: the kernel_info reply and one IOPub message; no wait for IOPub to fall silent (0.2 s each), and
    none for zmq's next try (0.1 s) to reach the kernel's sockets once they are there."""
    k = Kernel(course / "autograded" / "ada" / "a")  # its own: the module's kernel has forked to its limit
    try:
        assert isinstance(k.kc, sandbox.PromptKernelClient)
        for channel in (k.kc.shell_channel, k.kc.iopub_channel):  # a starting kernel is found within 10 ms
            assert channel.socket.getsockopt(zmq.RECONNECT_IVL) == round(sandbox.RECONNECT_S * 1000) == 10
        reads = []
        get_msg = k.kc.iopub_channel.get_msg

        async def counted(timeout=None):
            reads.append(timeout)
            return await get_msg(timeout=timeout)

        k.kc.iopub_channel.get_msg = counted
        try:
            k.loop.run_until_complete(k.kc.wait_for_ready(timeout=30))
        finally:
            k.kc.iopub_channel.get_msg = get_msg
        assert reads == [sandbox.IOPUB_CONNECTED_S], "jupyter_client's wait reads until IOPub is silent"
        assert k.run("print('ready')").strip() == "ready"  # what the kernel_info left on IOPub does no harm
    finally:
        k.close()


def test_the_grading_client_says_when_the_kernel_died_before_it_was_ready(monkeypatch, tmp_path):
    monkeypatch.setenv(UNSANDBOXED, "1")
    monkeypatch.setattr(sandbox, "why_unavailable", lambda: "no sandbox in this test")
    km = kernel_manager()
    km.kernel_spec.argv = [sys.executable, "-c", "raise SystemExit(3)"]
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(km.start_kernel(cwd=str(tmp_path)))
        kc = km.client()
        kc.start_channels()
        with pytest.raises(RuntimeError, match="Kernel died before replying to kernel_info"):
            loop.run_until_complete(kc.wait_for_ready(timeout=30))
        kc.stop_channels()
        loop.run_until_complete(km.shutdown_kernel(now=True))
    finally:
        loop.close()
