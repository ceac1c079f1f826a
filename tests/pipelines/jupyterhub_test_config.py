"""The course's JupyterHub configuration (deploy/hub/jupyterhub_config.py) as the round-trip test runs it.

Only what a test needs differs: the addresses (free ports on 127.0.0.1), the hub's state in the test's folder,
the accounts (made by the test), and a service whose token lets the test start servers and hand each user a
token of their own. The environment variables below are set by tests/pipelines/test_jupyterhub_round_trip.py.
"""

import os
from pathlib import Path

c = get_config()  # noqa: F821 (provided by JupyterHub when it loads this file)
load_subconfig(str(Path(__file__).resolve().parents[2] / "deploy" / "hub" / "jupyterhub_config.py"))  # noqa: F821

env = os.environ
c.JupyterHub.bind_url = f"http://127.0.0.1:{env['HUB_TEST_PORT']}"
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{env['HUB_TEST_HUB_PORT']}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{env['HUB_TEST_PROXY_API_PORT']}"
c.JupyterHub.db_url = f"sqlite:///{env['HUB_TEST_STATE']}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = f"{env['HUB_TEST_STATE']}/jupyterhub_cookie_secret"
c.ConfigurableHTTPProxy.pid_file = f"{env['HUB_TEST_STATE']}/jupyterhub-proxy.pid"
c.Authenticator.allowed_users = set(env["HUB_TEST_USERS"].split())
c.JupyterHub.load_groups = {"instructors": {"users": env["HUB_TEST_INSTRUCTORS"].split()}}
c.JupyterHub.services = [{"name": "round-trip", "api_token": env["HUB_TEST_TOKEN"]}]
c.JupyterHub.load_roles = [{"name": "round-trip", "services": ["round-trip"],
                            "scopes": ["admin:users", "admin:servers", "tokens", "access:servers"]}]
c.Spawner.http_timeout = 120  # two cores start three servers at once
c.Spawner.start_timeout = 120
c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 0}  # the test starts every server at once, then waits
