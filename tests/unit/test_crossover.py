"""horovod_torus.crossover: the cache key, the cache file (atomic, versioned, corrupt files ignored with a
warning), the decision from measured ratios, and the agreement of ranks whose own measurements disagree
(simulated ranks in threads, horovod_torus.inprocess)."""
import json
import os
import warnings

import numpy as np
import pytest

from horovod_torus import crossover
from horovod_torus.crossover import (
    NEVER, Calibration, CrossoverCacheWarning, CrossoverKey, cache_path, calibrate, decide, host_runs, read_cache,
    resolve, write_cache,
)
from horovod_torus.inprocess import run_ranks


def key(**changes):
    base = dict(world_size=4, grid="2x2", launcher="mpirun", hosts=(("vm", 4),), transport="mpi",
                variant="column=mpi", version="0.1.0")
    return CrossoverKey(**{**base, **changes})


def calibration(value=65536):
    return Calibration(min_torus_bytes=value, ratios={65536: 0.5, 16384: 1.2}, rounds=5, calls=2, seconds=1.5)


def test_host_runs_keep_rank_order():
    assert host_runs(["a", "a", "b", "a"]) == (("a", 2), ("b", 1), ("a", 1))
    assert host_runs([]) == ()


@pytest.mark.parametrize("field, value", [
    ("world_size", 8), ("grid", "4x1"), ("launcher", "horovodrun"), ("hosts", (("vm", 2), ("vm2", 2))),
    ("hosts", (("vm2", 2), ("vm", 2))), ("transport", "horovod"), ("variant", "column=ring"), ("version", "0.2.0"),
])
def test_every_part_of_the_key_changes_the_file(field, value):
    assert key().digest() == key().digest()
    assert key(**{field: value}).digest() != key().digest()
    assert cache_path("/c", key(**{field: value})) != cache_path("/c", key())


def test_cache_round_trip_writes_one_versioned_file(tmp_path):
    path = write_cache(str(tmp_path), key(), calibration(65536))
    assert path == cache_path(str(tmp_path), key()) and os.path.basename(path).startswith("crossover-")
    assert os.listdir(tmp_path) == [os.path.basename(path)]  # no temporary file left
    doc = json.loads(open(path).read())
    assert doc["format"] == crossover.FORMAT and doc["key"] == key().as_dict()
    assert doc["min_torus_bytes"] == 65536 and doc["ratios"] == {"65536": 0.5, "16384": 1.2}
    assert read_cache(str(tmp_path), key()) == 65536
    assert read_cache(str(tmp_path), key(world_size=8)) is None  # another key: another file, absent
    assert read_cache(None, key()) is None


def test_the_cache_write_is_atomic(tmp_path, monkeypatch):
    """A failing rename keeps the old file whole and reports a warning, not an error."""
    write_cache(str(tmp_path), key(), calibration(4096))

    def fail(src, dst):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", fail)
    with pytest.warns(CrossoverCacheWarning, match="could not write the crossover cache .*disk full"):
        assert write_cache(str(tmp_path), key(), calibration(NEVER)) is None
    monkeypatch.undo()
    assert read_cache(str(tmp_path), key()) == 4096
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(cache_path(str(tmp_path), key()))]


@pytest.mark.parametrize("content, why", [
    ("{not json", "unreadable"),
    (json.dumps({"format": 999, "key": None, "min_torus_bytes": 1}), "format 999, expected 1"),
    (json.dumps([1, 2]), "format None"),
    (json.dumps({"format": 1, "key": {"world_size": 4}, "min_torus_bytes": 1}), "another key"),
    (json.dumps({"format": 1, "key": "KEY", "min_torus_bytes": -5}), "min_torus_bytes=-5"),
    (json.dumps({"format": 1, "key": "KEY", "min_torus_bytes": "4096"}), "min_torus_bytes='4096'"),
    (json.dumps({"format": 1, "key": "KEY", "min_torus_bytes": True}), "min_torus_bytes=True"),
])
def test_a_corrupt_or_foreign_file_is_ignored_with_a_warning(tmp_path, content, why):
    path = cache_path(str(tmp_path), key())
    with open(path, "w") as f:
        f.write(content.replace('"KEY"', json.dumps(key().as_dict())))
    with pytest.warns(CrossoverCacheWarning, match=f"ignoring the crossover cache .*{why}"):
        assert read_cache(str(tmp_path), key()) is None


def test_a_missing_file_is_silent(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_cache(str(tmp_path / "absent"), key()) is None


@pytest.mark.parametrize("ratios, want", [
    ({4096: 2.0, 65536: 1.1, 1 << 20: 0.9, 16 << 20: 0.5}, 1 << 20),
    ({4096: 0.5, 65536: 0.5}, 4096),
    ({4096: 0.5, 65536: 0.5, 1 << 20: 1.0}, NEVER),   # loses at the largest: always flat
    ({4096: 0.5, 65536: 0.96}, NEVER),                  # within the margin of a tie: flat
    ({4096: 0.5, 65536: 0.95}, 4096),
    ({4096: 0.5, 65536: float("nan")}, NEVER),
])
def test_decide_takes_the_smallest_size_from_which_the_torus_always_wins(ratios, want):
    assert decide(ratios) == want


def fake_times(costs):
    """measure() of a rank whose calls cost ``costs[(nbytes, algorithm)]`` seconds; records the calls."""
    log = []

    def measure(nbytes, algorithm, calls, warmup):
        log.append((nbytes, algorithm, calls, warmup))
        return [costs[(nbytes, algorithm)]] * calls
    return measure, log


def test_calibrate_alternates_orders_warms_up_once_and_stops_at_the_first_loss():
    sizes = (4096, 65536, 1 << 20)
    costs = {(1 << 20, "flat"): 2.0, (1 << 20, "torus"): 1.0, (65536, "flat"): 1.0, (65536, "torus"): 0.5,
             (4096, "flat"): 1.0, (4096, "torus"): 3.0, (16384, "flat"): 1.0, (16384, "torus"): 0.5}
    measure, log = fake_times(costs)
    result = calibrate(measure, lambda v: v, sizes=sizes, rounds=5, calls=2)
    # the torus loses at 4 KiB after a win at 64 KiB: 16 KiB, between them, is measured too, and wins
    assert result.min_torus_bytes == 16384
    assert result.ratios == {1 << 20: 0.5, 65536: 0.5, 4096: 3.0, 16384: 0.5}
    # 3 rounds of 5 on one side decide the median: the rounds stop there, per size
    big = [x for x in log if x[0] == 1 << 20]
    assert [x[1] for x in big] == ["flat", "torus", "torus", "flat", "flat", "torus"]
    assert [x[3] for x in big] == [1, 1, 0, 0, 0, 0]        # one warm-up per algorithm and size
    assert {x[2] for x in big} == {1} and {x[2] for x in log if x[0] < 1 << 20} == {2}  # 1 call from 1 MiB
    assert [x[0] for x in log] == [1 << 20] * 6 + [65536] * 6 + [4096] * 6 + [16384] * 6
    # a loss between them too: the crossover stays at the last win, and nothing more is measured
    measure, log = fake_times({**costs, (16384, "torus"): 1.2})
    result = calibrate(measure, lambda v: v, sizes=sizes, rounds=5, calls=2)
    assert result.min_torus_bytes == 65536 and result.ratios[16384] == 1.2 and len(log) == 24
    # on one host the flat call wins at the largest size: one size measured, never the torus
    measure, log = fake_times({k: (1.0 if k[1] == "flat" else 1.5) for k in costs})
    result = calibrate(measure, lambda v: v, sizes=sizes)
    assert result.min_torus_bytes == NEVER and {x[0] for x in log} == {1 << 20}
    assert result.ratios == {1 << 20: 1.5} and result.rounds == crossover.ROUNDS
    with pytest.raises(ValueError, match="rounds >= 1"):
        calibrate(measure, lambda v: v, sizes=sizes, rounds=0)


@pytest.mark.parametrize("lost, won, want", [
    (4 << 20, 16 << 20, 8 << 20), (4096, 65536, 16384), (4096, None, None), (4096, 8192, 5792),
    (4096, 4100, None), (4096, 4096, None),
])
def test_midpoint_is_the_geometric_mean_in_whole_float32s(lost, won, want):
    assert crossover.midpoint(lost, won) == want


def test_calibrate_takes_the_median_over_rounds():
    """Noise: one slow round of the torus does not flip the decision, and the rounds go on while the
    median is undecided. Ratios per round: 9, 0.5, 2, 0.5, 0.5 -> median 0.5."""
    rounds = iter([1.0, 9.0, 0.5, 1.0, 1.0, 2.0, 0.5, 1.0, 1.0, 0.5])   # (flat, torus), (torus, flat), ...
    calls = []

    def measure(nbytes, algorithm, count, warmup):
        calls.append(algorithm)
        return [next(rounds)]
    result = calibrate(measure, lambda v: v, sizes=(4096,), rounds=5, calls=1)
    assert calls == ["flat", "torus", "torus", "flat", "flat", "torus", "torus", "flat", "flat", "torus"]
    assert result.ratios == {4096: 0.5} and result.min_torus_bytes == 4096


def test_ranks_that_measure_differently_agree_on_the_maximum():
    """Rank 0 alone sees the torus win; the other ranks see it lose: the MAX over ranks of each round's
    medians decides, and every rank sets the same crossover (the flat call)."""
    def body(t):
        win = t.rank == 0
        costs = {(4096, "flat"): 1.0, (4096, "torus"): 0.5 if win else 1.5,
                 (65536, "flat"): 1.0, (65536, "torus"): 0.5 if win else 1.5}
        measure, _ = fake_times(costs)

        def agree_max(values):
            return np.max(np.stack(t.world.exchange(t.rank, np.asarray(values))), axis=0)
        return calibrate(measure, agree_max, sizes=(4096, 65536), rounds=3, calls=1)
    results = run_ranks("2x2", body)
    assert [r.min_torus_bytes for r in results] == [NEVER] * 4
    assert len({tuple(sorted(r.ratios.items())) for r in results}) == 1
    assert results[0].ratios == {65536: 1.5}


def test_ranks_whose_torus_wins_only_on_some_sizes_agree_per_size():
    def body(t):
        slow = 1.2 if t.rank == 3 else 0.6   # rank 3's torus is slow below 64 KiB only
        costs = {(4096, "flat"): 1.0, (4096, "torus"): slow, (65536, "flat"): 1.0, (65536, "torus"): 0.5,
                 (16384, "flat"): 1.0, (16384, "torus"): slow}
        measure, _ = fake_times(costs)
        return calibrate(measure, lambda v: np.max(np.stack(t.world.exchange(t.rank, np.asarray(v))), axis=0),
                         sizes=(4096, 65536), rounds=3, calls=1)
    assert [r.min_torus_bytes for r in run_ranks("2x2", body)] == [65536] * 4


def test_resolve_uses_rank_0s_cache_and_broadcasts_it(tmp_path):
    """Only rank 0 reads the file: ranks whose own directories differ (or hold another value) still take
    rank 0's value, and nobody calibrates."""
    dirs = [tmp_path / f"r{r}" for r in range(4)]
    write_cache(str(dirs[0]), key(), calibration(65536))
    write_cache(str(dirs[1]), key(), calibration(4096))

    def body(t):
        def never():
            raise AssertionError("calibrated despite rank 0's cache")
        return resolve(key(), rank=t.rank, cache_dir=str(dirs[t.rank]),
                       broadcast=lambda obj: t.world.exchange(t.rank, obj)[0], run_calibration=never)
    assert run_ranks("2x2", body) == [(65536, "cache")] * 4


def test_resolve_calibrates_together_and_rank_0_writes_the_cache(tmp_path):
    def body(t):
        return resolve(key(), rank=t.rank, cache_dir=str(tmp_path / f"r{t.rank}"),
                       broadcast=lambda obj: t.world.exchange(t.rank, obj)[0],
                       run_calibration=lambda: calibration(1 << 20))
    assert run_ranks("2x2", body) == [(1 << 20, "measured")] * 4
    assert read_cache(str(tmp_path / "r0"), key()) == 1 << 20
    assert not (tmp_path / "r1").exists()
    # the next start reads it
    assert run_ranks("2x2", lambda t: resolve(
        key(), rank=t.rank, cache_dir=str(tmp_path / f"r{t.rank}"),
        broadcast=lambda obj: t.world.exchange(t.rank, obj)[0],
        run_calibration=lambda: calibration(7))) == [(1 << 20, "cache")] * 4


def test_resolve_after_a_corrupt_file_measures_again_and_repairs_it(tmp_path):
    path = cache_path(str(tmp_path), key())
    os.makedirs(tmp_path, exist_ok=True)
    with open(path, "w") as f:
        f.write("\x00garbage")
    with pytest.warns(CrossoverCacheWarning, match="ignoring the crossover cache"):
        got = resolve(key(), rank=0, cache_dir=str(tmp_path), broadcast=lambda obj: obj,
                      run_calibration=lambda: calibration(NEVER))
    assert got == (NEVER, "measured") and read_cache(str(tmp_path), key()) == NEVER


def test_show_lists_the_cache_and_the_cli_prints_it(tmp_path, capsys):
    write_cache(str(tmp_path), key(), calibration(65536))
    (tmp_path / "crossover-bad.json").write_text("{")
    (tmp_path / "other.json").write_text("{}")
    listed = crossover.show(str(tmp_path))
    assert sorted(os.path.basename(d["path"]) for d in listed) == sorted(
        [os.path.basename(cache_path(str(tmp_path), key())), "crossover-bad.json"])
    good = next(d for d in listed if "error" not in d)
    assert good["min_torus_bytes"] == 65536 and good["key"] == key().as_dict()
    assert crossover.show(str(tmp_path / "absent")) == []
    from horovod_torus.calibrate import main as calibrate_main
    assert calibrate_main(["--show", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "mpi 4 ranks grid 2x2 mpirun hosts [['vm', 4]] -> min_torus_bytes 65536" in out
    assert "crossover-bad.json: Expecting" in out


def test_numpy_api_algorithm_follows_min_torus_bytes():
    """TorusComm.algorithm: the flat call strictly below min_torus_bytes, the torus from it; 0: always."""
    from types import SimpleNamespace

    from horovod_torus.mpi import TorusComm

    tc = SimpleNamespace(min_torus_bytes=65536)
    assert [TorusComm.algorithm(tc, n) for n in (0, 65535, 65536)] == ["flat", "flat", "torus"]
    tc.min_torus_bytes = 0
    assert TorusComm.algorithm(tc, 0) == "torus"
