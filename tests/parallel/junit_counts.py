"""Counts of a multi-rank pytest launch from the JUnit XML file each rank wrote (tests/parallel/rank_pytest.sh).

Usage: junit_counts.py DIR NP   (DIR holds rank0.xml .. rank<NP-1>.xml)
       junit_counts.py --file XML  (one pytest run's file, e.g. a test that drives launches itself)

Prints one line, rank 0's counts: ``PASSED FAILED SKIPPED SUMMARY``, where FAILED counts failures and
errors and SUMMARY is pytest's own wording (``3 passed, 1 skipped in 4.20s``; ``no JUnit XML`` when rank 0
wrote none). Then one line per problem: a rank whose file is missing or unreadable, or that reports a
failure or an error. Exit status: 0 when every rank's file is there with no failure or error and rank 0
passed at least one test, else 1. With ``--file``: the same first line for that one file (``0 1 0 ...``
when it is missing or unreadable), exit 0 when it reports no failure or error.
"""
from __future__ import annotations

import os
import sys
import xml.etree.ElementTree as ET


def counts(path: str) -> dict:
    """Sums over the file's ``<testsuite>`` elements: tests, failures, errors, skipped, passed, time (s).

    Raises OSError (no file) or ET.ParseError (not XML, e.g. a rank killed while writing it)."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    c = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    c["time"] = sum(float(s.get("time", 0)) for s in suites)
    c["passed"] = c["tests"] - c["failures"] - c["errors"] - c["skipped"]
    return c


def summary(c: dict) -> str:
    """pytest's last line for these counts, e.g. ``1 failed, 3 passed, 1 skipped, 1 error in 4.20s``."""
    parts = [f"{c[k]} {word}" for k, word in (("failures", "failed"), ("passed", "passed"),
                                               ("skipped", "skipped")) if c[k]]
    if c["errors"]:
        parts.append(f"{c['errors']} error{'s' if c['errors'] > 1 else ''}")
    return f"{', '.join(parts) or 'no tests ran'} in {c['time']:.2f}s"


def one_file(path: str) -> int:
    """``--file PATH``: print ``PASSED FAILED SKIPPED SUMMARY`` of one JUnit XML file; 1 on failures."""
    try:
        c = counts(path)
    except (OSError, ET.ParseError) as err:
        print(f"0 1 0 JUnit XML missing or unreadable ({type(err).__name__}: {err})")
        return 1
    print(c["passed"], c["failures"] + c["errors"], c["skipped"], summary(c))
    return 1 if c["failures"] or c["errors"] else 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--file":
        return one_file(argv[1])
    if len(argv) != 2 or not argv[1].isdigit() or int(argv[1]) < 1:
        print(f"usage: junit_counts.py DIR NP (got {argv})", file=sys.stderr)
        return 2
    directory, np_ = argv[0], int(argv[1])
    first, problems = None, []
    for rank in range(np_):
        path = os.path.join(directory, f"rank{rank}.xml")
        try:
            c = counts(path)
        except (OSError, ET.ParseError) as err:
            problems.append(f"rank {rank}: JUnit XML missing or unreadable ({type(err).__name__}: {err})")
            continue
        if rank == 0:
            first = c
        if c["failures"] or c["errors"]:
            problems.append(f"rank {rank}: {summary(c)}")
    if first is None:
        print("0 0 0 no JUnit XML")
    else:
        print(first["passed"], first["failures"] + first["errors"], first["skipped"], summary(first))
        if first["passed"] == 0:
            problems.append("rank 0: no test passed")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
