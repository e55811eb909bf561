"""The result line of the stall scripts (test_stall_*.py, run by tests/parallel/run_stall.sh as scripts)."""
import os


def report(rank, line):
    """One result line: printed, and appended to STALL_DIR/rank<R>.txt (launcher output interleaves)."""
    print(line, flush=True)
    with open(os.path.join(os.environ.get("STALL_DIR", "/tmp"), f"rank{rank}.txt"), "a") as fh:
        fh.write(line + "\n")


def waited_enough(took, deadline, text):
    """A raise came after the deadline, unless this rank took another rank's verdict (it then entered the
    call late or its op was ended by that rank: its own wait may be shorter). ``took``, ``deadline``: s."""
    return deadline <= took or "joined the roll call of rank" in text or "decided by rank" in text
