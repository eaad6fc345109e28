"""`make hub`: a JupyterHub on this machine, for an instructor to try the class before a term.

`make hub` installs the users' environment (the course, JupyterLab, nbgrader and JupyterHub, at
the versions of constraints.txt, in build/hub/venv) and JupyterHub's proxy (npm's
configurable-http-proxy, in build/hub/node_modules), then runs this script as root with that
environment's Python. The script

1. refuses, in one sentence, where it cannot do its job: not root (it creates accounts and
   starts each user's server as that account), no `useradd`, or an environment that the other
   accounts cannot read (the clone sits in a private home folder);
2. creates the local accounts, one instructor and the students, each with a private home
   (mode 0700) and a generated password (kept for the next start in <state>/hub/accounts.json,
   readable by root only). An account that exists but was not made here is never touched;
3. makes nbgrader's exchange, <state>/exchange, with the permissions nbgrader documents
   (everyone may write; the sticky bit keeps one account from deleting another's files), and
   in it the course's folder, owned by the instructor with nbgrader's modes (course and
   outbound 0755, inbound 2733, feedback 0711), before any student can log in: a student who
   made it first would own the course's exchange (reliability review, S2);
4. gives the instructor the course directory ~/tfscratch on first start (as `make
   assignments` makes build/classroom: classroom/nbgrader_config.py, every notebook in
   source/), whose `exchange` is a link to the shared exchange;
5. writes each role's Jupyter configuration to <state>/etc: students get the Assignments tab
   (nbgrader's assignment list) and no formgrader, the instructor both; everyone's terminal
   keeps the users' environment on PATH (classroom/hub/common/), and everyone's nbgrader uses
   the exchange of classroom/tfscratch_exchange.py (a submission is its owner's and the
   instructor's only; collect skips an entry not made by the student it names);
6. starts JupyterHub (classroom/jupyterhub_config.py), prints the URL and the logins, and on
   Ctrl-C (or SIGTERM) stops it, which stops every user's server and the proxy.

Everything outside this file that the hub needs, the test and the README use from here too:
`user_environment` is what a user's server (and so their terminal) runs with.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

CLASSROOM = Path(__file__).resolve().parent
ROOT = CLASSROOM.parent
COURSE_ID = "tfscratch"
COURSE_FOLDER = "tfscratch"  # the instructor's course directory, in their home
EXCHANGE_PLUGINS = "tfscratch_exchange.py"  # nbgrader's exchange, made safe between students
SETTINGS_VARIABLE = "TFSCRATCH_HUB_SETTINGS"  # how jupyterhub_config.py finds this run's settings
ROLES = ("instructor", "student")
START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 60
RUNNING_LINE = b"JupyterHub is now running at"


class Refusal(Exception):
    """What `make hub` cannot do here, said in one sentence to the person who ran it."""


# -- settings shared by this script, classroom/jupyterhub_config.py and tests/test_hub.py ----


def settings_for(args: argparse.Namespace) -> dict:
    state = Path(args.state).resolve()
    return {
        "venv": str(Path(args.venv).resolve()),
        "proxy": str(Path(args.proxy).resolve()),
        "state": str(state),
        "exchange": str(state / "exchange"),
        "ip": args.ip,
        "port": args.port,
        "hub_port": free_port(),
        "proxy_api_port": free_port(),
        "instructor": args.instructor,
        "students": args.students.split(),
    }


def load_settings() -> dict:
    """This run's settings, in JupyterHub's process (classroom/jupyterhub_config.py)."""
    return json.loads(Path(os.environ[SETTINGS_VARIABLE]).read_text())


def role_of(settings: dict, username: str) -> str:
    return "instructor" if username == settings["instructor"] else "student"


def user_environment(settings: dict, role: str) -> dict[str, str]:
    """What a user's server runs with, beside what JupyterHub sets (HOME, USER, its own).

    JUPYTER_CONFIG_PATH puts the role's configuration first: nbgrader's settings for everyone
    (course id, exchange) and the role's extensions. PATH starts with the users' environment,
    so a terminal in the Lab finds `nbgrader` and `python` there. One BLAS thread, as on
    Binder (binder/start): a student's server gets about one CPU, and OpenBLAS would otherwise
    start a thread per core of the machine, which then wait on each other.
    """
    etc = Path(settings["state"]) / "etc"
    return {
        "JUPYTER_CONFIG_PATH": os.pathsep.join([str(etc / role), str(etc / "common")]),
        "PATH": os.pathsep.join(
            [str(Path(settings["venv"]) / "bin"), "/usr/local/bin", "/usr/bin", "/bin"]
        ),
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def course_directory(settings: dict) -> Path:
    return Path(pwd.getpwnam(settings["instructor"]).pw_dir) / COURSE_FOLDER


# -- the checks ------------------------------------------------------------------------------


def check_rights() -> None:
    if os.geteuid() != 0:
        raise Refusal(
            "make hub creates local accounts (useradd) and starts each user's server as that "
            "account, which only root may do: run it as root (sudo make hub) on a machine you "
            "may add accounts to."
        )
    if not shutil.which("useradd") or not shutil.which("chpasswd"):
        raise Refusal(
            "make hub creates local accounts with useradd and chpasswd, which this machine "
            "does not have (Debian and Ubuntu: apt-get install passwd)."
        )


def check_readable_by_everyone(settings: dict) -> None:
    """Each user's server runs the environment's Python as that user: can another account?"""
    python = Path(settings["venv"]) / "bin" / "python"
    probe = subprocess.run(
        [
            "runuser",
            "-u",
            "nobody",
            "--",
            str(python),
            "-c",
            "import jupyterhub, nbgrader, tfscratch",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
    )
    if probe.returncode != 0:
        blocked = [
            str(p) for p in [python.parent, *python.parents] if not p.stat().st_mode & stat.S_IXOTH
        ]
        where = f" ({blocked[-1]} is closed to other accounts)" if blocked else ""
        raise Refusal(
            f"The users' environment {settings['venv']} cannot be run by other accounts{where}, "
            "so no student's server could start: run make hub with HUB=<a folder every account "
            "can read>, e.g. sudo make hub HUB=/opt/tfscratch-hub."
        )


# -- accounts --------------------------------------------------------------------------------


def accounts_file(settings: dict) -> Path:
    return Path(settings["state"]) / "hub" / "accounts.json"


def ensure_accounts(settings: dict) -> dict[str, str]:
    """Create the accounts this hub serves (once) and return {name: password}.

    A name that already belongs to an account not made by `make hub` (in this state folder) is
    refused: its password must not be reset, nor its home handed to the class.
    """
    path = accounts_file(settings)
    made = json.loads(path.read_text()) if path.exists() else {}
    names = [settings["instructor"], *settings["students"]]
    if len(set(names)) != len(names):
        raise Refusal(f"make hub needs distinct account names, got {' '.join(names)}.")
    for name in names:
        try:
            pwd.getpwnam(name)
        except KeyError:
            create_account(name)
            made[name] = secrets.token_urlsafe(9)
            set_password(name, made[name])
            save_accounts(path, made)
            continue
        if name not in made:
            raise Refusal(
                f"An account named {name} already exists and was not made by make hub: choose "
                "other names (HUB_INSTRUCTOR=..., HUB_STUDENTS=...) rather than hand it to the class."
            )
    return {name: made[name] for name in names}


def create_account(name: str) -> None:
    created = subprocess.run(
        ["useradd", "--create-home", "--shell", "/bin/bash", name],
        capture_output=True,
        text=True,
        check=False,
    )
    if created.returncode != 0:
        raise Refusal(f"useradd could not create the account {name}: {created.stderr.strip()}")
    # Debian's useradd makes homes readable by everyone (mode 0755): a student's work is theirs.
    os.chmod(pwd.getpwnam(name).pw_dir, 0o700)


def set_password(name: str, password: str) -> None:
    subprocess.run(["chpasswd"], input=f"{name}:{password}\n", text=True, check=True)


def save_accounts(path: Path, accounts: dict[str, str]) -> None:
    path.write_text(json.dumps(accounts, indent=1))
    path.chmod(0o600)


# -- folders and configuration ---------------------------------------------------------------


def prepare_state(settings: dict) -> None:
    state = Path(settings["state"])
    state.mkdir(parents=True, exist_ok=True)
    state.chmod(0o755)  # every user's server reads etc/ and the exchange below it
    (state / "hub").mkdir(exist_ok=True)
    (state / "hub").chmod(0o700)  # JupyterHub's database, cookie secret and the passwords
    exchange = Path(settings["exchange"])
    exchange.mkdir(exist_ok=True)
    exchange.chmod(0o1777)
    write_configuration(settings)


# nbgrader's modes for a course's folders in the exchange (ExchangeReleaseAssignment and
# ExchangeReleaseFeedback): students read outbound, write but cannot list inbound (whose
# set-group-ID bit gives each submission the instructor's group), and open feedback by name.
COURSE_EXCHANGE_MODES = {".": 0o755, "outbound": 0o755, "inbound": 0o2733, "feedback": 0o711}


def ensure_course_exchange(settings: dict) -> Path:
    """<exchange>/tfscratch and its folders, the instructor's, made before any student logs in.

    One that exists and belongs to another account was made by someone else (a student, before
    the first release): the hub refuses to start on it rather than hand the course to them.
    """
    account = pwd.getpwnam(settings["instructor"])
    course = Path(settings["exchange"]) / COURSE_ID
    for name, mode in COURSE_EXCHANGE_MODES.items():
        path = (course / name) if name != "." else course
        if path.is_symlink() or (path.exists() and path.lstat().st_uid != account.pw_uid):
            owner = pwd.getpwuid(path.lstat().st_uid).pw_name
            raise Refusal(
                f"The course's exchange folder {path} belongs to {owner}, not to the instructor "
                f"{settings['instructor']}: someone made it before the hub did. Look at what is in "
                "it, move it away, and start make hub again (it makes the folder itself)."
            )
        path.mkdir(exist_ok=True)
        os.chown(path, account.pw_uid, account.pw_gid)
        path.chmod(mode)
    return course


def write_configuration(settings: dict) -> None:
    """<state>/etc/{instructor,student} from classroom/hub/, and common/ (nbgrader's settings)."""
    etc = Path(settings["state"]) / "etc"
    for role in (*ROLES, "common"):
        shutil.rmtree(etc / role, ignore_errors=True)
        shutil.copytree(CLASSROOM / "hub" / role, etc / role)
    shutil.copy(
        ROOT / "jupyter" / "learner" / "jupyter_server_config.py",
        etc / "common" / "learner_contents_config.py",
    )
    plugins = etc / "common" / EXCHANGE_PLUGINS
    shutil.copy(CLASSROOM / EXCHANGE_PLUGINS, plugins)
    (etc / "common" / "nbgrader_config.py").write_text(
        "# Written by `make hub` (classroom/hub.py): nbgrader's settings for every account.\n"
        "import importlib.util\n\n"
        "c = get_config()  # noqa: F821\n"
        f"c.CourseDirectory.course_id = {COURSE_ID!r}\n"
        f"c.Exchange.root = {settings['exchange']!r}\n"
        "# a submission is its owner's and the instructor's; collect skips forged entries\n"
        f"spec = importlib.util.spec_from_file_location('tfscratch_exchange', {str(plugins)!r})\n"
        "exchange = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(exchange)\n"
        "exchange.use_in(c)\n"
    )
    for path in [etc, *etc.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


def ensure_course_directory(settings: dict) -> Path:
    """The instructor's ~/tfscratch on first start; an existing one is the instructor's own."""
    course = course_directory(settings)
    link = course / "exchange"
    if not course.exists():
        account = pwd.getpwnam(settings["instructor"])
        for notebook in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
            (course / "source" / notebook.stem).mkdir(parents=True)
            shutil.copy(notebook, course / "source" / notebook.stem)
        shutil.copy(CLASSROOM / "nbgrader_config.py", course / "nbgrader_config.py")
        shutil.copy(CLASSROOM / EXCHANGE_PLUGINS, course / EXCHANGE_PLUGINS)
        link.symlink_to(settings["exchange"])
        for path in [course, *course.rglob("*")]:
            os.chown(path, account.pw_uid, account.pw_gid, follow_symlinks=False)
    elif link.is_symlink() and os.readlink(link) != settings["exchange"]:
        link.unlink()
        link.symlink_to(settings["exchange"])
    return course


# -- running the hub -------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def public_url(settings: dict) -> str:
    host = "127.0.0.1" if settings["ip"] in ("", "0.0.0.0") else settings["ip"]
    return f"http://{host}:{settings['port']}"


def relay_log(hub: subprocess.Popen, running: threading.Event) -> None:
    """Copy JupyterHub's log to this terminal, and note when it says it is running.

    Asking the proxy before JupyterHub has given it a route makes the proxy log an error with a
    stack trace, which would look like a failure to an instructor: so the script waits for
    JupyterHub's own "is now running" line (after its routes are in place), then checks once.
    """
    for line in hub.stdout:
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
        if RUNNING_LINE in line:
            running.set()


def wait_until_answering(url: str, hub: subprocess.Popen, running: threading.Event) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not running.wait(0.5):
        if hub.poll() is not None:
            raise Refusal(
                f"JupyterHub stopped while starting (exit code {hub.returncode}); its log is above."
            )
        if time.monotonic() > deadline:
            raise Refusal(f"JupyterHub did not start within {START_TIMEOUT_S} s; its log is above.")
    try:
        with urllib.request.urlopen(f"{url}/hub/api", timeout=10) as response:
            status = response.status
    except OSError as error:  # urllib's HTTPError and URLError are OSErrors
        status = error
    if status != 200:
        raise Refusal(f"JupyterHub said it was running, but {url}/hub/api answered {status}.")


def print_logins(settings: dict, accounts: dict[str, str], course: Path) -> None:
    url = public_url(settings)
    width = max(len(name) for name in accounts)
    print(f"\n==> The class's hub is running at {url} (stop it with Ctrl-C)", flush=True)
    print(f"    Log in on {url}/hub/login as one of these local accounts:")
    for name, password in accounts.items():
        if role_of(settings, name) == "instructor":
            what = f"instructor: course directory {course}; grade at {url}/user/{name}/formgrader"
        else:
            what = "student: Nbgrader > Assignment List in the Lab"
        print(f"      {name:<{width}}  password {password}   ({what})")
    print("    The passwords are kept (root only) in", accounts_file(settings), "\n", flush=True)


def run_hub(settings: dict, accounts: dict[str, str], course: Path) -> int:
    settings_path = Path(settings["state"]) / "hub" / "settings.json"
    settings_path.write_text(json.dumps(settings, indent=1))
    env = {**os.environ, SETTINGS_VARIABLE: str(settings_path)}
    command = [
        str(Path(settings["venv"]) / "bin" / "jupyterhub"),
        "-f",
        str(CLASSROOM / "jupyterhub_config.py"),
    ]
    # A session of its own: Ctrl-C reaches this script, which stops the hub once, with SIGTERM
    # (JupyterHub then stops every user's server and the proxy before it exits).
    hub = subprocess.Popen(
        command,
        cwd=settings_path.parent,
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    running = threading.Event()
    relay = threading.Thread(target=relay_log, args=(hub, running), daemon=True)
    relay.start()
    stopping = []

    def stop(signum, frame):
        if not stopping:
            stopping.append(signum)
            print("\n==> Stopping the hub, its users' servers and the proxy", flush=True)
            hub.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        wait_until_answering(public_url(settings), hub, running)
        print_logins(settings, accounts, course)
        while hub.poll() is None:
            time.sleep(0.5)
    except Refusal:
        stop(signal.SIGTERM, None)
        raise
    finally:
        if hub.poll() is None:
            try:
                hub.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                hub.kill()
                hub.wait()
        relay.join(timeout=5)
    names = " ".join(accounts)
    print(
        f"==> The hub has stopped. Its accounts stay for the next make hub; remove them with: "
        f"userdel -r {names}",
        flush=True,
    )
    return 0 if stopping or hub.returncode == 0 else hub.returncode


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", required=True, help="the users' environment")
    parser.add_argument("--proxy", required=True, help="configurable-http-proxy's executable")
    parser.add_argument("--state", required=True, help="exchange, configuration, hub database")
    parser.add_argument("--ip", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--instructor", default="tfs-instructor")
    parser.add_argument("--students", default="tfs-student1 tfs-student2")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    settings = settings_for(parse_args(argv))
    try:
        check_rights()
        check_readable_by_everyone(settings)
        prepare_state(settings)
        accounts = ensure_accounts(settings)
        ensure_course_exchange(settings)
        course = ensure_course_directory(settings)
        return run_hub(settings, accounts, course)
    except Refusal as refusal:
        print(f"==> {refusal}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
