"""JupyterHub for the course: local accounts, nbgrader's exchange, the instructors' formgrader.

Run it as root from the course environment (README "A course on a JupyterHub"):
    sudo .venv/bin/jupyterhub -f deploy/hub/jupyterhub_config.py
Everyone logs in with their account on this machine (PAM) and gets a JupyterLab of their own, started as
that account from the course environment. The instructors (the group below) get the course folder and
nbgrader's formgrader; students get the Assignments tab (fetch, submit, fetch feedback) and nothing of the
instructors' tools. Assignments go through nbgrader's exchange, a shared folder (/srv/nbgrader/exchange,
nbgrader's default), whose file permissions keep each student's submission from the others.
"""

import os
import pwd
import sys
from pathlib import Path

c = get_config()  # noqa: F821 (provided by JupyterHub when it loads this file)

HERE = Path(__file__).resolve().parent
ENV_BIN = Path(sys.executable).parent  # the course environment, which the hub runs in
INSTRUCTORS = "instructors"  # the JupyterHub group whose members grade
# an instructor's clone of the course repository, in their home: their server's folder
COURSE_FOLDER = "hwopt"
EVERYONE_CONFIG = HERE / "everyone"  # every server's nbgrader settings: the course, the exchange
STUDENT_CONFIG = HERE / "student"  # students' Jupyter settings: no formgrader, no course list

c.JupyterHub.authenticator_class = "pam"  # accounts of this machine
c.JupyterHub.spawner_class = "localprocess"  # each server runs as its user's account
c.Authenticator.allowed_users = set()  # the students and instructors (or: c.Authenticator.allow_all = True)
c.JupyterHub.load_groups = {INSTRUCTORS: {"users": []}}  # the instructors' account names
c.Spawner.cmd = [str(ENV_BIN / "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"


def course_servers(spawner) -> None:
    """Instructors work in the course folder, whose nbgrader_config.py their nbgrader reads (the formgrader
    reads the Jupyter config path, not the server's folder); students get the students' Jupyter settings."""
    if any(group.name == INSTRUCTORS for group in spawner.user.groups):
        course = Path(pwd.getpwnam(spawner.user.name).pw_dir) / COURSE_FOLDER
        spawner.notebook_dir = str(course)
        config = (course, EVERYONE_CONFIG)
    else:
        config = (STUDENT_CONFIG, EVERYONE_CONFIG)
    spawner.environment["JUPYTER_CONFIG_PATH"] = os.pathsep.join(map(str, config))


c.Spawner.pre_spawn_hook = course_servers
