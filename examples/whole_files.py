"""Files written whole or not at all, so that a run stopped at any moment
(Ctrl-C, a killed process) leaves the previous file readable: the backup of
`training_utils.ExactBackupAndRestore`, the budget file of
`training_budget.TimeBudget`, and the run record of `run_folder.py`.
"""

import os


def write_whole(path, text):
    """Writes `text` to `path` whole or not at all: beside it, then renamed
    over it, so a run stopped mid-write leaves the previous file."""
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
