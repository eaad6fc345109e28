"""An instructor's term on `make hub`: one assignment through nbgrader's exchange, end to end.

The test starts the Makefile's `make hub` (classroom/hub.py: JupyterHub, PAM logins, local
accounts, nbgrader's exchange) on a free loopback port with a state folder of its own, and
three new accounts with unique names: an instructor and two students, alice and bob. It
prints the hub's URL and each account's login. Then each step is done by the account that
does it in a class:

1. the course's folder in the exchange is the instructor's, with nbgrader's modes, before anyone
   logs in, and alice (logged in first) cannot plant an assignment in it or take it over (S2 of
   the reliability review); make hub refuses to start on one someone else made;
2. the instructor starts their server through the hub's REST API, opens a terminal of their
   Lab (POST api/terminals, then the terminal's websocket) and types README.md's commands
   verbatim: `cd ~/tfscratch`, `nbgrader generate_assignment` and `release_assignment` of 02;
3. alice and bob each get an API token with their password and start their server through
   the hub's REST API (the server runs as their account), and each types README.md's student
   commands (`python -c "import tfscratch"`, `nbgrader list`) in a terminal of their Lab;
4. each fetches 02 through their own server, with the calls the Assignments tab makes
   (GET assignments, POST assignments/fetch);
5. alice writes the instructor's solution into her copy and submits; bob answers the first
   exercise and submits, then starts over and resubmits the untouched notebook: the latest
   submission is the one that counts, so his first would score and his last does not;
6. alice's submission belongs to her account and the instructor's group only: bob can neither
   list the exchange's inbound folder, nor read or write her submission knowing its name, nor
   read her copy in her home; then bob files his notebook as alice's submission, dated 2099
   (S1 of the reliability review);
7. in the same terminal, the instructor collects (bob's forgery skipped, and said so; alice's
   own submission and bob's latest collected), autogrades (alice: full marks, the sum of 02's
   points; bob: 0), exports grades.csv, generates and releases feedback;
8. each student fetches their feedback through their server and finds their score in it;
9. in Chromium, through the real pages: alice logs in on the hub's login page and sees 02 in
   the Assignments tab; the instructor's Lab has the formgrader (in its Nbgrader menu and at
   /user/<instructor>/formgrader, which lists 02) and alice's has neither. Screenshots in
   build/hub-test/, with the calls each account made and the lines it typed (calls.txt);
10. the hub stops cleanly on Ctrl-C (SIGINT to `make hub`): no process of the class is left.

Whatever happens, the fixture stops the hub and removes the accounts (`userdel -r`).
`make hub` needs root, as it creates accounts: run as anyone else (`nobody`), it refuses with a
sentence that says so; and it refuses, saying where to put it instead, a users' environment
that other accounts cannot run (a clone in a private home). Marked `hub`: `make test-hub` runs it (.ci/run does).
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import psutil
import pytest
import requests
import websocket

pytestmark = pytest.mark.hub

ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENT = "02_softmax_and_loss"
SOURCE = ROOT / "notebooks" / f"{ASSIGNMENT}.ipynb"
COURSE_ID = "tfscratch"
ARTIFACTS = ROOT / "build" / "hub-test"
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
START_TIMEOUT_S = 900  # the first `make hub` installs the users' environment and the proxy
HTTP_TIMEOUT_S = 120
NBGRADER_TIMEOUT_S = 600
README = ROOT / "README.md"
FORGED_TIMESTAMP = "2099-01-01 00:00:00.000000 UTC"

spec = importlib.util.spec_from_file_location("tfscratch_hub", ROOT / "classroom" / "hub.py")
hub_module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hub_module)


def readable_by_everyone(path: Path) -> bool:
    return all(p.stat().st_mode & stat.S_IXOTH for p in [path, *path.parents])


# The users' environment must be readable by the students' accounts: the clone's build/hub if
# every account can reach the clone (as in /work or /srv), else a folder in /opt, where The
# Littlest JupyterHub keeps its users' environment too (make hub refuses a private one).
HUB_DIR = ROOT / "build" / "hub" if readable_by_everyone(ROOT) else Path("/opt/tfscratch-hub")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Account:
    name: str
    role: str  # "instructor" or "student"
    password: str = ""
    token: str = ""

    @property
    def home(self) -> Path:
        return Path(pwd.getpwnam(self.name).pw_dir)

    @property
    def uid(self) -> int:
        return pwd.getpwnam(self.name).pw_uid


@dataclass
class Hub:
    url: str
    state: Path
    process: subprocess.Popen
    log_path: Path
    accounts: dict[str, Account]
    settings: dict = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    term: dict = field(default_factory=dict)  # what one step hands to the next

    @property
    def instructor(self) -> Account:
        return self.accounts["instructor"]

    @property
    def students(self) -> list[Account]:
        return [self.accounts["alice"], self.accounts["bob"]]

    @property
    def course(self) -> Path:
        return self.instructor.home / "tfscratch"

    @property
    def exchange(self) -> Path:
        return Path(self.settings["exchange"])

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def request(self, account: Account, method: str, path: str, **kwargs) -> requests.Response:
        """One HTTP call as ``account`` (with its token), recorded for the calls list."""
        headers = {"Authorization": f"token {account.token}"} if account.token else {}
        response = requests.request(
            method, f"{self.url}{path}", headers=headers, timeout=HTTP_TIMEOUT_S, **kwargs
        )
        shown = re.sub(r"\?.*", "", path) if "/api/contents/" in path else path
        self.calls.append(f"{account.name}: {method} {shown} -> {response.status_code}")
        return response

    def as_account(self, account: Account, *argv: str, cwd: Path) -> subprocess.CompletedProcess:
        """A command run by ``account`` itself, with the environment the hub gives its server."""
        env = {
            "HOME": str(account.home),
            "USER": account.name,
            "LOGNAME": account.name,
            "SHELL": "/bin/bash",
            "LANG": "C.UTF-8",
            **hub_module.user_environment(self.settings, account.role),
        }
        command = ["runuser", "-u", account.name, "--", "env", "-i"]
        command += [f"{key}={value}" for key, value in env.items()] + list(argv)
        self.calls.append(f"{account.name}: {' '.join(argv)}")
        return subprocess.run(
            command,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=NBGRADER_TIMEOUT_S,
            check=False,
        )

    def start_server(self, account: Account) -> None:
        """A token from the account's password, then its server, through the hub's REST API."""
        auth = {"auth": {"username": account.name, "password": account.password}}
        response = self.request(account, "POST", f"/hub/api/users/{account.name}/tokens", json=auth)
        assert response.status_code == 201, response.text
        account.token = response.json()["token"]
        response = self.request(account, "POST", f"/hub/api/users/{account.name}/server")
        assert response.status_code in (201, 202), response.text

    def wait_for_server(self, account: Account) -> None:
        deadline = time.monotonic() + 120
        while True:
            response = self.request(account, "GET", f"/hub/api/users/{account.name}")
            server = response.json()["servers"].get("")
            if server and server["ready"]:
                return
            assert time.monotonic() < deadline, f"{account.name}'s server did not start"
            time.sleep(1)

    def terminal(self, account: Account) -> Terminal:
        """A new terminal of the account's Lab (File > New > Terminal does the same call)."""
        response = self.request(account, "POST", f"/user/{account.name}/api/terminals")
        assert response.status_code == 200, response.text
        name = response.json()["name"]
        path = f"/user/{account.name}/terminals/websocket/{name}"
        self.calls.append(f"{account.name}: (websocket) {path}")
        url = self.url.replace("http://", "ws://") + path
        socket_ = websocket.create_connection(
            url, header=[f"Authorization: token {account.token}"], timeout=NBGRADER_TIMEOUT_S
        )
        return Terminal(self, account, name, socket_)


@dataclass
class Terminal:
    """A Lab terminal (terminado's websocket): lines typed as a person types them."""

    hub: Hub
    account: Account
    name: str
    socket: websocket.WebSocket

    def run(self, line: str, timeout: float = NBGRADER_TIMEOUT_S) -> tuple[int, str]:
        """Type ``line`` and Enter, then wait for it to finish: (exit status, what it printed).

        The status is echoed after the line as `__rc=N__`, typed as `__rc"="$?__`, so what the
        terminal echoes of the typing never matches."""
        self.hub.calls.append(f"{self.account.name} (terminal): {line}")
        started = time.monotonic()
        self.socket.send(json.dumps(["stdin", f'{line}\recho "__rc"="$?"__\r']))
        output = ""
        deadline = started + timeout
        while not (found := re.search(r"__rc=(\d+)__", output)):
            assert time.monotonic() < deadline, f"{line!r} did not finish:\n{output}"
            self.socket.settimeout(max(1.0, deadline - time.monotonic()))
            message = json.loads(self.socket.recv())
            if message[0] == "stdout":
                output += message[1]
            elif message[0] == "disconnect":
                raise AssertionError(f"the terminal closed during {line!r}:\n{output}")
        self.hub.term.setdefault("seconds", {})[line] = time.monotonic() - started
        return int(found.group(1)), output

    def close(self) -> None:
        self.socket.close()
        self.hub.request(
            self.account, "DELETE", f"/user/{self.account.name}/api/terminals/{self.name}"
        )


def readme_commands(introduction: str) -> list[str]:
    """The lines of README.md's first bash block after ``introduction``, comment lines left out
    (each line is typed verbatim, with its trailing comment)."""
    text = README.read_text()
    assert introduction in text, introduction
    block = text.split(introduction, 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [
        line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]


INSTRUCTOR_COMMANDS = readme_commands("In a terminal of the instructor's Lab")
STUDENT_COMMANDS = readme_commands("A student's terminal has the course too")
# The instructor's commands, as the term goes: release before the students work, the rest after.
RELEASE_COMMANDS = INSTRUCTOR_COMMANDS[:3]
GRADING_COMMANDS = INSTRUCTOR_COMMANDS[3:]


# -- starting and stopping the hub -----------------------------------------------------------


def processes_of(names: set[str]) -> list:
    found = []
    for process in psutil.process_iter(["username", "pid"]):
        if process.info["username"] in names:
            found.append(process)
    return found


def stop_hub(hub: Hub, timeout: float = 90) -> None:
    """Ctrl-C, as in the terminal that runs `make hub`: SIGINT to its process group (make and
    classroom/hub.py, which stops JupyterHub); then wait for every process it started."""
    if hub.process.poll() is None:
        try:
            family = psutil.Process(hub.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            family = []
        os.killpg(hub.process.pid, signal.SIGINT)
        try:
            hub.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        _, alive = psutil.wait_procs(family, timeout=timeout)
        for process in alive:  # only processes this test started, by their id
            process.kill()
        if hub.process.poll() is None:
            hub.process.kill()
            hub.process.wait()


def remove_accounts(hub: Hub) -> None:
    names = {account.name for account in hub.accounts.values()}
    leftovers = processes_of(names)
    for process in leftovers:
        process.kill()
    psutil.wait_procs(leftovers, timeout=30)
    for name in names:
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        subprocess.run(["userdel", "-r", name], capture_output=True, check=False)


@pytest.fixture(scope="module")
def hub():
    if os.geteuid() != 0:
        pytest.skip("make hub creates local accounts, which needs root (CI runs this as root)")
    suffix = secrets.token_hex(3)
    accounts = {
        "instructor": Account(f"teacher-{suffix}", "instructor"),
        "alice": Account(f"alice-{suffix}", "student"),
        "bob": Account(f"bob-{suffix}", "student"),
    }
    state = Path(tempfile.mkdtemp(prefix="tfscratch-hub-"))
    state.chmod(0o755)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    log_path = ARTIFACTS / "make-hub.log"
    port = free_port()
    command = [
        "make", "--no-print-directory", "-C", str(ROOT), "hub",
        f"HUB={HUB_DIR}", f"HUB_STATE={state}", f"HUB_PORT={port}",
        f"HUB_INSTRUCTOR={accounts['instructor'].name}",
        f"HUB_STUDENTS={accounts['alice'].name} {accounts['bob'].name}",
    ]  # fmt: skip
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
    hub = Hub(f"http://127.0.0.1:{port}", state, process, log_path, accounts)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while "The class's hub is running at" not in hub.log():
            assert process.poll() is None, f"make hub stopped:\n{hub.log()}"
            assert time.monotonic() < deadline, f"no hub after {START_TIMEOUT_S} s:\n{hub.log()}"
            time.sleep(0.5)
        hub.settings = json.loads((state / "hub" / "settings.json").read_text())
        passwords = json.loads((state / "hub" / "accounts.json").read_text())
        for account in accounts.values():
            account.password = passwords[account.name]
        yield hub
    finally:
        stop_hub(hub)
        remove_accounts(hub)
        shutil.rmtree(state, ignore_errors=True)
        seconds = hub.term.get("seconds", {})
        timings = [f"{seconds[step]:6.1f} s  {step}" for step in seconds]
        (ARTIFACTS / "calls.txt").write_text("\n".join(hub.calls + ["", *timings]) + "\n")


# -- the term --------------------------------------------------------------------------------


def points(notebook: nbformat.NotebookNode) -> float:
    return sum(
        cell.metadata["nbgrader"].get("points", 0)
        for cell in notebook.cells
        if cell.metadata.get("nbgrader", {}).get("grade")
    )


def answers(notebook: nbformat.NotebookNode) -> dict[str, str]:
    """grade_id -> source of every answer cell."""
    return {
        cell.metadata["nbgrader"]["grade_id"]: cell.source
        for cell in notebook.cells
        if cell.metadata.get("nbgrader", {}).get("solution")
    }


def answered(student: dict, solutions: dict[str, str]) -> dict:
    """The student's notebook (JSON) with the answer cells in ``solutions`` written in."""
    notebook = nbformat.from_dict(json.loads(json.dumps(student)))
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.metadata.get("nbgrader", {}).get("solution") and grade_id in solutions:
            cell.source = solutions[grade_id]
    return notebook


def notebook_path(name: str = ASSIGNMENT) -> str:
    return f"{ASSIGNMENT}/{name}.ipynb"


def assignment_list(hub: Hub, student: Account) -> list[dict]:
    """What the Assignments tab shows: GET assignments?course_id=... on the student's server."""
    response = hub.request(
        student, "GET", f"/user/{student.name}/assignments?course_id={COURSE_ID}"
    )
    assert response.status_code == 200, response.text
    reply = response.json()
    assert reply["success"], reply
    return [entry for entry in reply["value"] if entry["assignment_id"] == ASSIGNMENT]


def assignment_action(hub: Hub, student: Account, action: str) -> dict:
    """A button of the Assignments tab: POST assignments/<fetch|submit|fetch_feedback>."""
    body = {"course_id": COURSE_ID, "assignment_id": ASSIGNMENT}
    response = hub.request(student, "POST", f"/user/{student.name}/assignments/{action}", json=body)
    assert response.status_code == 200, response.text
    reply = response.json()
    assert reply["success"], f"{action} as {student.name}: {reply}"
    return reply


def submissions(hub: Hub, student: Account) -> list[dict]:
    """The student's submissions of 02 as their Assignments tab lists them, oldest first."""
    submitted = [entry for entry in assignment_list(hub, student) if entry["status"] == "submitted"]
    return [submission for entry in submitted for submission in entry["submissions"]]


def save_notebook(hub: Hub, student: Account, notebook) -> None:
    model = {"type": "notebook", "format": "json", "content": notebook}
    path = f"/user/{student.name}/api/contents/{notebook_path()}"
    response = hub.request(student, "PUT", path, json=model)
    assert response.status_code == 200, response.text


def assert_student_version(notebook) -> None:
    """Solution cells hold an open scaffold, and no line points to a hidden solution."""
    solutions = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("solution")]
    assert solutions
    for cell in solutions:
        assert "raise NotImplementedError()" in cell.source
        assert "jupyter" not in cell.metadata, cell.metadata
    assert not [c for c in notebook.cells if "Try it first" in c.source]


def test_make_hub_prints_the_url_and_how_to_log_in(hub):
    startup = hub.log().split("The class's hub is running at")
    assert startup[1].startswith(f" {hub.url} (stop it with Ctrl-C)")
    assert f"Log in on {hub.url}/hub/login" in startup[1]
    for account in hub.accounts.values():
        assert re.search(rf"{account.name} +password {re.escape(account.password)} ", startup[1])
    # nothing on the way there that looks like a failure (the proxy's errors, tracebacks)
    assert not re.search(r"\[ConfigProxy\] \S*error", startup[0]) and "Traceback" not in startup[0]


def test_the_courses_exchange_is_the_instructors_before_anyone_logs_in(hub):
    # S2 of the reliability review: a student who made exchange/tfscratch before the first
    # release owned the course's exchange. make hub makes it, the instructor's, with nbgrader's
    # modes; then alice, logged in first, can neither plant an assignment nor take it over.
    course = hub.exchange / COURSE_ID
    for name, mode in hub_module.COURSE_EXCHANGE_MODES.items():
        info = (course / name).stat()
        assert info.st_uid == hub.instructor.uid, name
        assert stat.S_IMODE(info.st_mode) == mode, (name, oct(info.st_mode))
    alice = hub.accounts["alice"]
    attacks = [
        ["mkdir", "-p", str(course / "outbound" / ASSIGNMENT)],
        ["chmod", "777", str(course / "inbound")],
        ["mv", str(course), str(hub.exchange / "taken")],
        ["rm", "-rf", str(course)],
        ["mkdir", str(course / "feedback" / "planted")],
    ]
    for argv in attacks:
        probe = hub.as_account(alice, *argv, cwd=Path("/"))
        assert probe.returncode != 0, (argv, probe)
        assert re.search("Permission denied|Operation not permitted", probe.stderr), probe.stderr
    assert not (course / "outbound" / ASSIGNMENT).exists() and course.is_dir()


def test_make_hub_refuses_a_course_exchange_someone_else_made(hub, tmp_path):
    squatted = tmp_path / "exchange" / COURSE_ID
    squatted.mkdir(parents=True)
    nobody = pwd.getpwnam("nobody")
    os.chown(squatted, nobody.pw_uid, nobody.pw_gid)
    settings = {"instructor": hub.instructor.name, "exchange": str(tmp_path / "exchange")}
    with pytest.raises(hub_module.Refusal) as refusal:
        hub_module.ensure_course_exchange(settings)
    assert f"{squatted} belongs to nobody, not to the instructor" in str(refusal.value)
    assert squatted.stat().st_uid == nobody.pw_uid  # left as it was, for root to look at


def test_the_instructor_releases_02_in_a_terminal_of_their_lab(hub):
    # README's commands, typed verbatim in a terminal the instructor's Lab opens (POST
    # api/terminals, then terminado's websocket): the first three release 02.
    assert RELEASE_COMMANDS[0] == "cd ~/tfscratch"
    assert [line.split()[:3] for line in RELEASE_COMMANDS[1:]] == [
        ["nbgrader", "generate_assignment", ASSIGNMENT],
        ["nbgrader", "release_assignment", ASSIGNMENT],
    ]
    hub.start_server(hub.instructor)
    hub.wait_for_server(hub.instructor)
    terminal = hub.terminal(hub.instructor)
    hub.term["instructor terminal"] = terminal  # the rest of the term is typed in it too
    status, output = terminal.run("command -v nbgrader python")
    venv = Path(hub.settings["venv"]) / "bin"
    assert status == 0 and f"{venv}/nbgrader" in output and f"{venv}/python" in output, output
    for line in RELEASE_COMMANDS:
        status, output = terminal.run(line)
        assert status == 0, f"{line}:\n{output}"
    released = hub.exchange / COURSE_ID / "outbound" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    assert released.is_file()
    assert released.stat().st_uid == hub.instructor.uid
    text = released.read_text()
    assert "BEGIN SOLUTION" not in text and "raise NotImplementedError()" in text
    assert_student_version(nbformat.reads(text, as_version=4))
    python = Path(hub.settings["venv"]) / "bin" / "python"
    version = subprocess.run(
        [python, "-c", "import sys; print(sys.version.split()[0])"],
        capture_output=True,
        text=True,
        check=True,
    )
    hub.term["kernel python"] = version.stdout.strip()
    # The course directory's `exchange` is the hub's shared one (classroom/nbgrader_config.py).
    assert (hub.course / "exchange").resolve() == hub.exchange.resolve()


def test_each_student_starts_a_server_through_the_hubs_rest_api(hub):
    for student in hub.students:
        hub.start_server(student)
    for student in hub.students:
        hub.wait_for_server(student)
        # The server is the student's own process, started from the users' environment.
        servers = [
            p
            for p in processes_of({student.name})
            if any("jupyterhub-singleuser" in part for part in p.cmdline())
        ]
        assert servers, f"no server of {student.name}"
        assert psutil.Process(servers[0].pid).uids().real == student.uid


def test_each_students_terminal_has_the_courses_python_and_nbgrader(hub):
    assert [line.split()[0] for line in STUDENT_COMMANDS] == ["python", "nbgrader"]
    for student in hub.students:
        terminal = hub.terminal(student)
        try:
            for line in STUDENT_COMMANDS:
                status, output = terminal.run(line, timeout=120)
                assert status == 0, f"{student.name}: {line}:\n{output}"
            assert f"{COURSE_ID} {ASSIGNMENT}" in output, output  # nbgrader list
        finally:
            terminal.close()


def test_each_student_fetches_02_through_their_own_server(hub):
    for student in hub.students:
        assert [entry["status"] for entry in assignment_list(hub, student)] == ["released"]
        assignment_action(hub, student, "fetch")
        assert [entry["status"] for entry in assignment_list(hub, student)] == ["fetched"]
        fetched = student.home / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
        assert fetched.stat().st_uid == student.uid
        response = hub.request(
            student, "GET", f"/user/{student.name}/api/contents/{notebook_path()}"
        )
        assert response.status_code == 200
        content = response.json()["content"]
        hub.term[student.name] = content  # the untouched student version
        # opened as the student's Lab opens it, it is not modified: the server hands it out with
        # the kernel's Python version, which JupyterLab would otherwise write in
        assert content["metadata"]["language_info"]["version"] == hub.term["kernel python"]
        # and it reads as a student's: every scaffold open, no "Try it first" line
        assert_student_version(nbformat.from_dict(content))


def test_alice_submits_the_solution_and_bob_resubmits_the_untouched_notebook(hub):
    alice, bob = hub.students
    solutions = answers(nbformat.read(SOURCE, as_version=4))
    assert len(solutions) >= 2
    save_notebook(hub, alice, answered(hub.term[alice.name], solutions))
    assignment_action(hub, alice, "submit")

    first_exercise = dict([next(iter(solutions.items()))])
    save_notebook(hub, bob, answered(hub.term[bob.name], first_exercise))
    assignment_action(hub, bob, "submit")
    save_notebook(hub, bob, hub.term[bob.name])  # bob starts over
    assignment_action(hub, bob, "submit")

    submitted = {student.name: submissions(hub, student) for student in hub.students}
    assert len(submitted[alice.name]) == 1 and len(submitted[bob.name]) == 2, submitted
    hub.term["submitted"] = submitted


def test_alices_submission_is_hers_and_bob_can_neither_read_nor_forge_it(hub):
    alice, bob = hub.students
    inbound = hub.exchange / COURSE_ID / "inbound"
    hers = [
        path for path in inbound.iterdir() if path.name.startswith(f"{alice.name}+{ASSIGNMENT}+")
    ]
    assert len(hers) == 1
    entry = hers[0]
    # Hers, in a folder open to her and the instructor's group only (inbound's set-group-ID
    # bit gives it that group; classroom/tfscratch_exchange.py closes it to others, where
    # nbgrader's own submit leaves it 0777).
    assert all(path.stat().st_uid == alice.uid for path in [entry, *entry.rglob("*")])
    assert entry.stat().st_gid == pwd.getpwnam(hub.instructor.name).pw_gid
    assert stat.S_IMODE(entry.stat().st_mode) == 0o770
    # nbgrader's inbound folder is write-only for students (mode 2733): bob cannot list it; and
    # knowing the name of her submission, he can neither read it nor write into it. Her own
    # copies are in her home, which only she can enter.
    assert stat.S_IMODE(inbound.stat().st_mode) & 0o777 == 0o733
    notebook = entry / f"{ASSIGNMENT}.ipynb"
    for argv in (
        ["ls", str(inbound)],
        ["ls", str(entry)],
        ["cat", str(notebook)],
        ["touch", str(entry / "planted.txt")],
        ["rm", "-f", str(notebook)],
        ["ls", str(alice.home / ASSIGNMENT)],
        ["cat", str(alice.home / notebook_path())],
    ):
        probe = hub.as_account(bob, *argv, cwd=Path("/"))
        assert probe.returncode != 0 and "Permission denied" in probe.stderr, (argv, probe)
    # bob's Assignments tab shows his own submissions only
    assert all(
        entry["student_id"] == bob.name
        for entry in assignment_list(hub, bob)
        if "student_id" in entry
    )
    # S1 of the reliability review: bob files his untouched notebook as alice's submission,
    # dated 2099 so that nbgrader would take it as her latest. The inbound folder lets him.
    forged = inbound / f"{alice.name}+{ASSIGNMENT}+{FORGED_TIMESTAMP}+forged"
    script = 'mkdir "$1" && cp "$2" "$1/" && printf %s "$3" > "$1/timestamp.txt"'
    his = bob.home / notebook_path()
    probe = hub.as_account(
        bob, "sh", "-c", script, "forge", str(forged), str(his), FORGED_TIMESTAMP, cwd=Path("/")
    )
    assert probe.returncode == 0, probe
    hub.term["forged"] = forged.name


def test_the_instructor_collects_autogrades_and_exports_the_grades(hub):
    alice, bob = hub.students
    terminal = hub.term["instructor terminal"]
    assert [line.split()[:2] for line in GRADING_COMMANDS] == [
        ["nbgrader", "collect"],
        ["nbgrader", "autograde"],
        ["nbgrader", "export"],
        ["nbgrader", "generate_feedback"],
        ["nbgrader", "release_feedback"],
    ]
    outputs = {}
    for line in GRADING_COMMANDS[:3]:
        status, outputs[line.split()[1]] = terminal.run(line)
        assert status == 0, f"{line}:\n{outputs[line.split()[1]]}"
    # bob's forgery is skipped, and said so; alice's own submission is collected
    collect = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", outputs["collect"])
    assert re.search(rf"Skipped {re.escape(hub.term['forged'])}: it claims to be", collect), collect
    for student in hub.students:
        collected = hub.course / "submitted" / student.name / ASSIGNMENT / "timestamp.txt"
        assert collected.read_text().strip() == hub.term["submitted"][student.name][-1]["timestamp"]
    with (hub.course / "grades.csv").open() as table:
        rows = {
            row["student_id"]: row
            for row in csv.DictReader(table)
            if row["assignment"] == ASSIGNMENT
        }
    full_marks = points(nbformat.read(SOURCE, as_version=4))
    assert full_marks >= 2
    assert float(rows[alice.name]["max_score"]) == full_marks
    assert float(rows[alice.name]["score"]) == full_marks
    assert float(rows[bob.name]["score"]) == 0
    hub.term["scores"] = {name: float(row["score"]) for name, row in rows.items()}
    hub.term["max_score"] = full_marks


def test_the_instructor_generates_and_releases_feedback(hub):
    terminal = hub.term["instructor terminal"]
    for line in GRADING_COMMANDS[3:]:
        status, output = terminal.run(line)
        assert status == 0, f"{line}:\n{output}"
    feedback = hub.exchange / COURSE_ID / "feedback"
    assert len(list(feedback.glob("*.html"))) == 2


def test_each_student_fetches_feedback_with_their_score(hub):
    for student in hub.students:
        assignment_action(hub, student, "fetch_feedback")
        folder = f"/user/{student.name}/api/contents/{ASSIGNMENT}/feedback"
        timestamps = hub.request(student, "GET", folder).json()["content"]
        assert len(timestamps) == 1, timestamps
        page = f"{folder}/{timestamps[0]['name']}/{ASSIGNMENT}.html"
        html = hub.request(student, "GET", page, params={"format": "text", "type": "file"})
        assert html.status_code == 200
        score, max_score = re.search(
            rf"{ASSIGNMENT} \(Score: ([\d.]+) / ([\d.]+)\)", html.json()["content"]
        ).groups()
        assert float(score) == hub.term["scores"][student.name]
        assert float(max_score) == hub.term["max_score"]


# -- through the real pages, in Chromium ------------------------------------------------------


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    assert CHROMIUM.exists() and CHROMEDRIVER.exists(), (
        "the hub test drives Debian's chromium and chromium-driver "
        "(apt-get install chromium chromium-driver; .ci/run installs them)"
    )
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run",
        "--disable-dev-shm-usage", "--window-size=1400,900",
    ):  # fmt: skip
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    yield driver
    driver.quit()


def wait_for(condition, timeout: float, what: str):
    from selenium.common.exceptions import WebDriverException

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = condition()
        except WebDriverException:  # the page is still loading: elements come and go
            value = None
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def log_in(driver, hub: Hub, account: Account) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{hub.url}/hub/logout")
    driver.get(f"{hub.url}/hub/login")
    wait_for(lambda: driver.find_element(By.ID, "username_input"), 30, "the login page")
    driver.find_element(By.ID, "username_input").send_keys(account.name)
    driver.find_element(By.ID, "password_input").send_keys(account.password)
    driver.find_element(By.ID, "login_submit").click()
    hub.calls.append(f"{account.name}: (Chromium) log in on /hub/login")
    lab = f"/user/{account.name}/lab"
    wait_for(lambda: lab in driver.current_url, 120, f"{account.name}'s Lab")
    wait_for(lambda: menu_bar_item(driver, "Nbgrader"), 120, "JupyterLab's menu bar")


def file_browser_text(driver) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, ".jp-DirListing-content").text


def menu_bar_item(driver, label: str):
    from selenium.webdriver.common.by import By

    for item in driver.find_elements(By.CSS_SELECTOR, ".lm-MenuBar-itemLabel"):
        if item.text == label:
            return item
    return None


def open_menu(driver, label: str) -> list[str]:
    """Click a menu of JupyterLab's menu bar and return its items' labels."""
    from selenium.webdriver.common.by import By

    menu_bar_item(driver, label).click()
    items = wait_for(
        lambda: [
            e.text for e in driver.find_elements(By.CSS_SELECTOR, ".lm-Menu-itemLabel") if e.text
        ],
        30,
        f"the {label} menu",
    )
    return items


def click_menu_item(driver, label: str) -> None:
    from selenium.webdriver.common.by import By

    for item in driver.find_elements(By.CSS_SELECTOR, ".lm-Menu-itemLabel"):
        if item.text == label:
            item.click()
            return
    raise AssertionError(f"no menu item {label!r}")


def test_in_chromium_a_student_sees_02_and_only_the_instructor_has_the_formgrader(hub, browser):
    from selenium.webdriver.common.by import By

    alice, instructor = hub.accounts["alice"], hub.instructor
    log_in(browser, hub, alice)
    wait_for(lambda: ASSIGNMENT in file_browser_text(browser), 60, f"{ASSIGNMENT}/ in her files")
    items = open_menu(browser, "Nbgrader")
    assert "Assignment List" in items and "Formgrader" not in items, items
    browser.save_screenshot(str(ARTIFACTS / "student-lab-nbgrader-menu.png"))
    click_menu_item(browser, "Assignment List")
    hub.calls.append(f"{alice.name}: (Chromium) Nbgrader > Assignment List")
    panel = wait_for(
        lambda: browser.find_element(By.ID, "nbgrader-assignment-list"), 60, "the Assignments tab"
    )
    wait_for(lambda: ASSIGNMENT in panel.text, 60, f"{ASSIGNMENT} in alice's Assignments tab")
    browser.save_screenshot(str(ARTIFACTS / "student-assignments-tab.png"))
    # her server has no formgrader at all, not only no menu item
    assert hub.request(alice, "GET", f"/user/{alice.name}/formgrader").status_code == 404

    log_in(browser, hub, instructor)
    items = open_menu(browser, "Nbgrader")
    assert "Formgrader" in items, items
    browser.save_screenshot(str(ARTIFACTS / "instructor-lab-nbgrader-menu.png"))
    # JupyterHub >= 4.1 forbids showing a server's pages in a frame (Content-Security-Policy
    # frame-ancestors 'none'), so the formgrader opens in a tab of its own: nbgrader's docs.
    browser.get(f"{hub.url}/user/{instructor.name}/formgrader")
    hub.calls.append(f"{instructor.name}: (Chromium) GET /user/{instructor.name}/formgrader")
    wait_for(lambda: "Manage Assignments" in browser.page_source, 60, "the formgrader")
    wait_for(lambda: ASSIGNMENT in browser.find_element(By.TAG_NAME, "body").text, 60, "02 listed")
    assert 'id="warning-exchange"' not in browser.page_source
    browser.save_screenshot(str(ARTIFACTS / "instructor-formgrader.png"))


def test_the_hub_stops_cleanly(hub):
    names = {account.name for account in hub.accounts.values()}
    assert processes_of(names), "the students' servers should be running before the stop"
    stop_hub(hub)
    assert "Stopping the hub, its users' servers and the proxy" in hub.log()
    assert "The hub has stopped" in hub.log(), hub.log()
    assert not processes_of(names), [p.info for p in processes_of(names)]
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", int(hub.url.rsplit(":", 1)[1]))) != 0


def test_make_hub_refuses_without_the_rights_to_create_accounts():
    command = ["make", "--no-print-directory", "-C", str(ROOT), "hub", f"HUB={HUB_DIR}"]
    if os.geteuid() == 0:
        if not readable_by_everyone(ROOT):
            pytest.skip("the clone is private to root, so no other account can run its Makefile")
        command = ["runuser", "-u", "nobody", "--", *command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0
    assert "only root may do: run it as root (sudo make hub)" in done.stderr, done.stderr


def test_make_hub_refuses_an_environment_other_accounts_cannot_run():
    # A clone in a private home (mode 0700, Ubuntu's default) holds a build/hub/venv that no
    # student's server could start from: make hub says so and where to put it instead.
    if os.geteuid() != 0:
        pytest.skip("runs the check as root, which then tries the environment as `nobody`")
    scratch = Path(tempfile.mkdtemp(prefix="tfscratch-private-"))
    try:
        scratch.chmod(0o755)
        private = scratch / "home"
        private.mkdir(mode=0o700)
        (private / "venv").symlink_to(HUB_DIR / "venv")
        with pytest.raises(hub_module.Refusal) as refusal:
            hub_module.check_readable_by_everyone({"venv": str(private / "venv")})
        assert f"({private} is closed to other accounts)" in str(refusal.value)
        assert "sudo make hub HUB=/opt/tfscratch-hub" in str(refusal.value)
    finally:
        shutil.rmtree(scratch)
