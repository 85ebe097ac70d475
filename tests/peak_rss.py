"""``python tests/peak_rss.py CMD...``: run CMD, then print its own peak resident size in bytes.

Why a separate small process: Linux keeps a process's peak RSS across ``exec``, so a child
started straight from a large pytest process reports pytest's size. Started from this small
interpreter, CMD's figure is its own. CMD's stderr passes through; its exit status is ours.
"""

from __future__ import annotations

import os
import subprocess
import sys


def main() -> None:
    proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here
    print(usage.ru_maxrss * 1024)
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
