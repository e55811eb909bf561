"""tests/parallel/junit_counts.py: rank 0's counts from per-rank JUnit XML, and every rank's problems."""
import importlib.util
import os

import pytest

_spec = importlib.util.spec_from_file_location(
    "junit_counts", os.path.join(os.path.dirname(__file__), "..", "parallel", "junit_counts.py"))
junit_counts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(junit_counts)


def _xml(path, tests, failures=0, errors=0, skipped=0, time=1.5):
    path.write_text(f'<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite '
                    f'name="pytest" errors="{errors}" failures="{failures}" skipped="{skipped}" '
                    f'tests="{tests}" time="{time}"></testsuite></testsuites>')


def test_all_ranks_clean(tmp_path, capsys):
    _xml(tmp_path / "rank0.xml", 5, skipped=1)
    _xml(tmp_path / "rank1.xml", 5, skipped=1)
    assert junit_counts.main([str(tmp_path), "2"]) == 0
    assert capsys.readouterr().out.splitlines() == ["4 0 1 4 passed, 1 skipped in 1.50s"]


@pytest.mark.parametrize("setup, problem", [
    (lambda d: _xml(d / "rank1.xml", 5, failures=1), "rank 1: 1 failed, 4 passed in 1.50s"),
    (lambda d: _xml(d / "rank1.xml", 1, errors=1), "rank 1: 1 error in 1.50s"),
    (lambda d: None, "rank 1: JUnit XML missing or unreadable (FileNotFoundError"),
    (lambda d: (d / "rank1.xml").write_text("<testsuites><testsu"), "rank 1: JUnit XML missing or unreadable (ParseError"),
])
def test_a_problem_on_another_rank_fails_the_launch(tmp_path, capsys, setup, problem):
    _xml(tmp_path / "rank0.xml", 5)
    setup(tmp_path)
    assert junit_counts.main([str(tmp_path), "2"]) == 1
    first, *problems = capsys.readouterr().out.splitlines()
    assert first == "5 0 0 5 passed in 1.50s"
    assert len(problems) == 1 and problems[0].startswith(problem)


def test_rank_0_counts_failures_and_errors_and_needs_a_pass(tmp_path, capsys):
    _xml(tmp_path / "rank0.xml", 4, failures=1, errors=1, skipped=2)
    assert junit_counts.main([str(tmp_path), "1"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "0 2 2 1 failed, 2 skipped, 1 error in 1.50s"
    assert "rank 0: no test passed" in out
    assert junit_counts.main([str(tmp_path), "x"]) == 2


def test_one_file_counts_and_failures(tmp_path, capsys):
    good = tmp_path / "good.xml"
    good.write_text('<testsuites><testsuite tests="2" failures="0" errors="0" skipped="0" time="1.5"/></testsuites>')
    assert junit_counts.main(["--file", str(good)]) == 0
    assert capsys.readouterr().out.split()[:3] == ["2", "0", "0"]
    bad = tmp_path / "bad.xml"
    bad.write_text('<testsuite tests="2" failures="1" errors="0" skipped="0" time="1"/>')
    assert junit_counts.main(["--file", str(bad)]) == 1
    assert capsys.readouterr().out.split()[:3] == ["1", "1", "0"]
    assert junit_counts.main(["--file", str(tmp_path / "missing.xml")]) == 1
    assert capsys.readouterr().out.split()[:2] == ["0", "1"]
