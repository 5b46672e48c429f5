"""No machine-specific absolute paths in the project's files.

A path such as the developers' shared data folder, a home directory or a
checkout location works on one machine only; code, docs and recorded results
name data relative to the repository (`../shared/data` from its root), by a
flag or by an environment variable instead.
"""

import os
import re
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
# Top-level folders of home directories and of this project's machines. Built
# from parts so that this file does not match itself.
MACHINE_FOLDERS = ("work", "root", "home", "Users")
# A path that starts there: not preceded by a word character, a dot, a colon
# or a slash, so URLs (https://host/home/...) and relative paths
# (shared/work/...) do not count.
ABSOLUTE_PATH = re.compile(r"(?<![\w.:/-])/(?:" + "|".join(MACHINE_FOLDERS) + r")/")


def project_files():
    """Tracked files and new files git would add (untracked, not ignored)."""
    try:
        listing = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"not a git checkout or git is missing: {error}")
    names = sorted({name for name in listing.decode().split("\0") if name})
    return [name for name in names if os.path.isfile(os.path.join(ROOT, name))]


def absolute_paths(text):
    """(line number, line) of every line of `text` with a machine path."""
    return [
        (number, line.strip())
        for number, line in enumerate(text.splitlines(), start=1)
        if ABSOLUTE_PATH.search(line)
    ]


def test_the_pattern_finds_machine_paths_and_nothing_else():
    machine = ["/" + folder + "/x" for folder in MACHINE_FOLDERS]
    text = "\n".join(
        [
            f"data = '{machine[0]}'",  # line 1
            "see https://example.org" + machine[2],  # a URL: not a machine path
            "../shared/data and shared" + machine[0],  # relative paths
            f"cd {machine[1]} && ls {machine[3]}",  # line 4
            f'"TF_CLI_CONFIG_FILE": "{machine[1]}.terraformrc"',  # line 5
        ]
    )
    assert [number for number, _ in absolute_paths(text)] == [1, 4, 5]


def test_no_absolute_machine_paths_in_project_files():
    files = project_files()
    assert "setup.cfg" in files and len(files) > 50
    hits = []
    for name in files:
        with open(os.path.join(ROOT, name), "rb") as handle:
            data = handle.read()
        if b"\0" in data:  # binary: MIDI, images, arrays
            continue
        text = data.decode("utf-8", errors="replace")
        hits += [f"{name}:{number}: {line[:160]}" for number, line in absolute_paths(text)]
    assert not hits, (
        f"{len(hits)} lines hold absolute machine paths; name data relative to the "
        "repository (../shared/data from its root), by a flag or an environment "
        "variable instead:\n" + "\n".join(hits)
    )
