"""Functions that misbehave the ways untrusted engine code could.

``recon run`` must contain each one: a clear error for the caller, the caller's
process and files unharmed.
"""

import os
import subprocess

BLOCK = 1 << 20


def spin():
    """Never returns."""
    n = 0
    while True:
        n += 1


def hog():
    """Allocates until something stops it."""
    chunks = []
    while True:
        chunks.append(bytearray(64 * BLOCK))


def exit_now():
    """Leaves the process without a word."""
    os._exit(7)


def write_outside(path):
    """Writes a file where it has no business."""
    with open(path, "w") as fh:
        fh.write("pwned")
    return "written"


def write_outside_quietly(path):
    """Tries to write outside and hides the failure."""
    try:
        with open(path, "w") as fh:
            fh.write("pwned")
    except Exception:
        pass
    return "nothing to see"


def write_scratch():
    """Writes in its working folder, which is allowed."""
    with open("notes.txt", "w") as fh:
        fh.write("ok")
    with open("notes.txt") as fh:
        return fh.read()


def start_process():
    """Starts a shell."""
    return subprocess.run(["sh", "-c", "echo hi"], capture_output=True).stdout


def flood():
    """Prints far too much."""
    line = "x" * 1000
    while True:
        print(line)


def environment():
    """Reads what the process can see of its caller (secrets in the environment?)."""
    return {"keys": sorted(os.environ), "home": os.environ.get("HOME"), "cwd": os.getcwd(),
            "v2": os.environ.get("VLLM_USE_V2_MODEL_RUNNER"), "uid": os.getuid()}
