"""JupyterHub's configuration for `make hub`, which classroom/hub.py starts with this file.

One class, one grader, as in nbgrader's "Using nbgrader with JupyterHub": local accounts that
log in with their passwords (PAM), each user's server started as that account
(LocalProcessSpawner) from the users' environment, and the proxy from npm. The run's settings
(ports, folders, accounts) come from classroom/hub.py, which wrote them before starting the hub.
"""

import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location("tfscratch_hub", Path(__file__).with_name("hub.py"))
hub = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hub)
settings = hub.load_settings()
state = Path(settings["state"])

c = get_config()  # noqa: F821 (JupyterHub provides get_config when it loads this file)
c.JupyterHub.bind_url = f"http://{settings['ip']}:{settings['port']}"
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = settings["hub_port"]
c.ConfigurableHTTPProxy.command = [settings["proxy"]]
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{settings['proxy_api_port']}"
c.JupyterHub.db_url = f"sqlite:///{state / 'hub' / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(state / "hub" / "jupyterhub_cookie_secret")

# Who may log in: the accounts make hub made, with their local passwords. The instructor is the
# hub's admin (its Admin page starts and stops the students' servers).
c.JupyterHub.authenticator_class = "pam"
c.Authenticator.allowed_users = {settings["instructor"], *settings["students"]}
c.Authenticator.admin_users = {settings["instructor"]}

# Each user's server: JupyterLab from the users' environment, with their role's configuration.
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [str(Path(settings["venv"]) / "bin" / "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"


def role_environment(spawner):
    role = hub.role_of(settings, spawner.user.name)
    spawner.environment.update(hub.user_environment(settings, role))


c.Spawner.pre_spawn_hook = role_environment
# What a student is sized for (README, "Teach this course"): every notebook's kernel peaks at
# <= 350 MB, and JupyterLab and a forgotten kernel need room too. LocalProcessSpawner only
# passes these on (MEM_LIMIT, CPU_LIMIT in the server's environment); a hub on Kubernetes
# (Zero to JupyterHub's singleuser.memory and singleuser.cpu) enforces them.
c.Spawner.mem_guarantee = "512M"
c.Spawner.mem_limit = "1G"
c.Spawner.cpu_guarantee = 0.5
c.Spawner.cpu_limit = 1.0
