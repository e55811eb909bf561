"""python -m horovod_torus.calibrate: a bad --grid is a one-line error (as python -m horovod_torus.bench
prints it), not a traceback; --help's description is whole. No launcher: MPI starts as a singleton."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(*args):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_TORUS_", "OMPI_", "PMI"))}
    return subprocess.run([sys.executable, "-m", "horovod_torus.calibrate", *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**env, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"})


@pytest.mark.parametrize("grid,message", [
    ("abc", "torus grid 'abc' is malformed: expected XxY with positive integers"),
    ("3x3", "torus grid 3x3 has 3x3=9 ranks but the world size is 1"),
])
def test_bad_grid_is_a_one_line_error(grid, message):
    out = _run("--grid", grid)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("horovod_torus.calibrate: error: ") and message in lines[0]


def test_malformed_grid_checked_as_the_bench_checks_it(capsys):
    from horovod_torus.bench.__main__ import main as bench_main
    from horovod_torus.calibrate import main

    assert main(["--grid", "2by2", "--show"]) == 2   # before --show, before MPI
    calibrate_err = capsys.readouterr().err
    assert bench_main(["--grid", "2by2"]) == 2
    bench_err = capsys.readouterr().err
    assert calibrate_err.split("error: ", 1)[1] == bench_err.split("error: ", 1)[1]


def test_help_description_is_whole():
    from horovod_torus.calibrate import main

    out = _run("--help")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert ("List the crossover cache, or (under a launcher) calibrate and cache the crossover of this job's key "
            "for the numpy API and, with --tensorflow, the TensorFlow torus.") in text
    assert "``" not in text and main.__doc__.split("\n\n")[0].rstrip().endswith("TensorFlow torus.")


def test_one_rank_says_nothing_was_cached(tmp_path):
    """One rank has no crossover to measure: the summary says nothing was cached (it said "cached in DIR")
    and the folder is not made."""
    cache = tmp_path / "cache"
    out = subprocess.run([sys.executable, "-m", "horovod_torus.calibrate"], capture_output=True, text=True,
                         timeout=120, cwd=ROOT,
                         env={**{k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_TORUS_", "OMPI_", "PMI"))},
                              "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3", "HOROVOD_TORUS_CACHE_DIR": str(cache)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-2:] == ["numpy API, grid 1x1: min_torus_bytes 0 (setting)",
                                            f"nothing measured (one rank): nothing cached in {cache}"]
    assert not cache.exists()


def test_show_on_an_empty_cache_says_so_and_never_is_written_in_words(tmp_path, capsys):
    import warnings as w

    from horovod_torus import crossover
    from horovod_torus.calibrate import _cache_warnings, _crossover_text, main
    assert main(["--show", "--cache-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"no crossover cache files in {tmp_path}\n"
    assert _crossover_text(crossover.NEVER) == f"{crossover.NEVER} (never: the flat call at every size)"
    assert _crossover_text(4096) == "4096"
    unwritten = []     # a cache that could not be written is recorded (the last line then says NOT cached)
    (tmp_path / "afile").write_text("x")
    calibration = crossover.Calibration(min_torus_bytes=4096, ratios={4096: 0.9}, rounds=1, calls=1, seconds=0.1)
    with w.catch_warnings(record=True) as shown:
        w.simplefilter("always")
        with _cache_warnings(unwritten):
            crossover.write_cache(str(tmp_path / "afile" / "sub"), _key(), calibration)
    assert len(unwritten) == 1 and [x.category for x in shown] == [crossover.CrossoverCacheWarning]


def _key():
    from horovod_torus import crossover
    return crossover.CrossoverKey(world_size=4, grid="2x2", launcher="mpirun", hosts=(("h", 4),), transport="numpy",
                                  variant="", version="0")
