"""Every account's server on the hub (`make hub`): what both roles share.

The Lab's terminal. A user's server runs with the users' environment first on PATH
(classroom/hub.py, `user_environment`), but jupyter_server starts a terminal as a *login* shell
when it runs under JupyterHub (`bash -l`), and a login shell reads /etc/profile, which on
Debian and Ubuntu sets PATH afresh: `nbgrader`, `python` and `jupyter` were then not found in
the terminal (newcomer review, defect 1). An interactive shell that is not a login shell keeps
the server's environment, whatever the system's login profile does, and still reads
/etc/bash.bashrc and the user's ~/.bashrc.
"""

c = get_config()  # noqa: F821 (Jupyter provides get_config when it loads this file)
c.ServerApp.terminado_settings = {"shell_command": ["/bin/bash", "-i"]}

# A notebook opens unmodified, as in `make lab`: the learner's contents manager hands each
# notebook out with the kernel's Python version (jupyter/learner/jupyter_server_config.py,
# copied beside this file by classroom/hub.py). Without it JupyterLab wrote that version into
# a fetched notebook on opening, so it opened marked modified (newcomer review, defect 9).
load_subconfig("learner_contents_config.py")  # noqa: F821
