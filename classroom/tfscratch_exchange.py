"""nbgrader's file exchange, with two changes so that students cannot tamper with each other.

nbgrader's inbound folder (mode 2733, group the instructor's) lets every student create
entries, named ``<student>+<assignment>+<timestamp>+<random>``, and nbgrader itself

- collects, for each student named in those names, the entry with the latest timestamp in its
  name, and only *warns* ("cheating attempt?") when the account that made it is another: any
  student could file a notebook as a classmate's submission, dated in 2099 so that it wins
  (reliability review, S1);
- copies a submission with files anyone may read (0644) in a folder anyone may write (0777):
  a student who learns a classmate's entry name can read and replace that submission.

``OwnersOnlyCollect`` collects an entry only if it, and everything in it, belongs to the
student it names, and no link is in it (the instructor's collect would follow a link into
their own files); other entries are skipped, with an error in the log that names them. A
student's own latest entry is collected even when a forged one is dated later.
``PrivateSubmit`` closes a submission's folders to everyone but its owner and the
instructor's group (mode 0770; the inbound folder's set-group-ID bit gives the entry the
instructor's group), so another student cannot read or write it, even knowing its name. Its
files stay 0644 as nbgrader makes them, readable only through those folders: nbgrader writes
``timestamp.txt`` after its copy has cleared the entry's set-group-ID bit (shutil.copytree
copies the mode of the student's folder), so that file has the student's own group.

Both are wired by ``use_in(c)``: `make hub` (classroom/hub.py) calls it in every account's
nbgrader configuration, and classroom/nbgrader_config.py in the course directory's. The
exchange's course folder itself must be the instructor's before any student logs in (made by
`make hub`), or a student can create it first and take the course over (S2).
"""

from __future__ import annotations

import os
import pwd
import stat

from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.exchange.default.submit import ExchangeSubmit

SUBMISSION_DIR_MODE = 0o770  # owner and the instructor's group (inherited from inbound)


def foreign_paths(entry: str, owner_uid: int) -> list[str]:
    """What in an inbound entry is a link or not owned by ``owner_uid`` (the entry included)."""
    found = []
    for path in [entry, *walk(entry)]:
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode) or info.st_uid != owner_uid:
            found.append(path)
    return found


def walk(entry: str) -> list[str]:
    paths = []
    if os.path.isdir(entry) and not os.path.islink(entry):
        for folder, dirs, files in os.walk(entry):
            paths += [os.path.join(folder, name) for name in dirs + files]
    return paths


def uid_of(username: str) -> int | None:
    try:
        return pwd.getpwnam(username).pw_uid
    except KeyError:
        return None


class OwnersOnlyCollect(ExchangeCollect):
    """nbgrader's collect, which skips an entry that is not wholly its named student's."""

    def _path_to_record(self, path):
        record = super()._path_to_record(path)
        uid = uid_of(record["username"])
        record["foreign"] = [path] if uid is None else foreign_paths(path, uid)
        if record["foreign"]:
            first = record["foreign"][0]
            try:
                owner = pwd.getpwuid(os.lstat(first).st_uid).pw_name
            except KeyError:
                owner = "an unknown account"
            self.log.error(
                "Skipped %s: it claims to be %s's submission, but %s is %s (owned by %s). "
                "Nothing is collected from it.",
                record["filename"],
                record["username"],
                first,
                "a link" if os.path.islink(first) else "not theirs",
                owner,
            )
        return record

    def _sort_by_timestamp(self, records):
        # nbgrader takes the first of these for each student: the student's own latest entry
        # comes first, so a forged entry dated later cannot hide it.
        return sorted(records, key=lambda r: (not r["foreign"], r["timestamp"]), reverse=True)

    def copy_files(self):
        self.src_records = [record for record in self.src_records if not record["foreign"]]
        super().copy_files()


class PrivateSubmit(ExchangeSubmit):
    """nbgrader's submit, leaving the submission to its owner and the instructor's group."""

    def set_perms(self, dest, fileperms, dirperms):
        if os.path.dirname(os.path.abspath(dest)) == os.path.abspath(self.inbound_path):
            dirperms = SUBMISSION_DIR_MODE
        super().set_perms(dest, fileperms, dirperms)

    def copy_files(self):
        super().copy_files()
        # nbgrader opens the entry's folder to everyone (0777) "so the instructor can delete
        # later": the instructor's group may, as the folder's group.
        entry = os.path.join(self.inbound_path, self.assignment_filename)
        os.chmod(entry, SUBMISSION_DIR_MODE)


def use_in(c) -> None:
    """Wire both into an nbgrader configuration ``c``."""
    c.ExchangeFactory.collect = OwnersOnlyCollect
    c.ExchangeFactory.submit = PrivateSubmit
