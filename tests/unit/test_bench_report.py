"""Benchmark arithmetic (no MPI): sizes, algbw/busbw, the exact inputs and expected sums, the table, JSON."""
import json

import numpy as np
import pytest

from horovod_torus.atomic import write_json_atomic
from horovod_torus.bench.allreduce import BenchConfig, count_wrong, expected_sum, rank_input
from horovod_torus.bench.report import (
    Row, algbw_gbps, bench_document, busbw_gbps, canonical_dtype, format_row, format_size, format_table,
    parse_size, sweep_sizes,
)


def test_parse_and_format_size():
    assert parse_size("4") == 4
    assert parse_size("4K") == 4096
    assert parse_size("128M") == 134217728
    assert parse_size("1g") == 2 ** 30
    assert parse_size("16MB") == 16 * 2 ** 20
    assert format_size(134217728) == "128M" and format_size(4096) == "4K" and format_size(100) == "100"
    with pytest.raises(ValueError, match="'12Q' is malformed"):
        parse_size("12Q")


def test_sweep_sizes_nccl_tests_style():
    assert sweep_sizes(4, 128 * 2 ** 20, 2)[:3] == [4, 8, 16]
    assert sweep_sizes(4, 128 * 2 ** 20, 2)[-1] == 128 * 2 ** 20
    assert len(sweep_sizes(4, 128 * 2 ** 20, 2)) == 26
    assert sweep_sizes(1024, 1024, 1) == [1024]
    assert sweep_sizes(4096, 2 ** 20, 16) == [4096, 65536, 2 ** 20]
    with pytest.raises(ValueError, match="exceeds maximum size"):
        sweep_sizes(8, 4, 2)
    with pytest.raises(ValueError, match="factor -f 1"):
        sweep_sizes(4, 8, 1)


def test_algbw_busbw_definitions():
    # 1 GB in 0.5 s on 4 ranks: algbw 2 GB/s, busbw 2 * 2*3/4 = 3 GB/s (nccl-tests PERFORMANCE.md)
    assert algbw_gbps(10 ** 9, 0.5) == pytest.approx(2.0)
    assert busbw_gbps(10 ** 9, 0.5, 4) == pytest.approx(3.0)
    assert busbw_gbps(10 ** 9, 0.5, 1) == 0.0
    assert busbw_gbps(8 * 10 ** 6, 1e-3, 8) == pytest.approx(8 * 2 * 7 / 8)
    with pytest.raises(ValueError, match="must be positive"):
        algbw_gbps(4, 0.0)


def test_row_from_per_rank_times():
    row = Row.from_times("torus", 2 ** 18, "float32", [1e-3, 2e-3, 3e-3, 2e-3], 0, algorithm="flat")
    assert row.size_bytes == 2 ** 20
    assert row.time_us == pytest.approx({"min": 1000.0, "avg": 2000.0, "max": 3000.0})
    assert row.algbw_gbps == pytest.approx(2 ** 20 / 2e-3 / 1e9)
    assert row.busbw_gbps == pytest.approx(row.algbw_gbps * 1.5)
    line = format_row(row)
    assert line.split() == ["torus", "1048576", "262144", "float32", "sum", "1000.0", "2000.0", "3000.0",
                            f"{row.algbw_gbps:.3f}", f"{row.busbw_gbps:.3f}", "0", "flat"]
    assert "N/A" in format_row(Row.from_times("mpi", 1, "float64", [1e-6], None))
    torus = Row.from_times("mpi-torus", 4, "float32", [1e-3], 0, algorithm="torus", column="ring")
    assert format_row(torus).split()[-1] == "torus/ring"
    assert format_table([row]).count("\n") == 2


def test_json_document_keys(tmp_path):
    row = Row.from_times("ring", 4, "int32", [1e-5, 3e-5], 0)
    doc = bench_document([row], world_size=2, grid="2x1", host={"nodes": 1}, config={"iters": 5})
    path = tmp_path / "sub" / "b.json"
    write_json_atomic(str(path), doc)
    back = json.loads(path.read_text())
    assert set(back) >= {"world_size", "grid", "host", "rows"}
    assert set(back["rows"][0]) == {"strategy", "size_bytes", "count", "dtype", "time_us", "algbw_gbps",
                                    "busbw_gbps", "wrong", "algorithm", "column", "iters"}
    assert back["rows"][0]["time_us"] == pytest.approx({"min": 10.0, "avg": 20.0, "max": 30.0})
    assert list(tmp_path.joinpath("sub").iterdir()) == [path]  # no temporary file left behind


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("nranks", [1, 3, 4, 200])
def test_expected_sum_is_the_exact_sum_of_the_inputs(dtype, nranks):
    count = 11
    total = sum(rank_input(count, r, nranks, dtype) for r in range(nranks))
    np.testing.assert_array_equal(total, expected_sum(count, nranks, dtype))
    assert count_wrong(total, expected_sum(count, nranks, dtype)) == 0
    # inputs differ between ranks, so a result that missed a rank is caught
    if nranks > 1:
        partial = sum(rank_input(count, r, nranks, dtype) for r in range(nranks - 1))
        assert count_wrong(partial, expected_sum(count, nranks, dtype)) > 0


def test_inputs_are_exact_in_half_precision():
    import ml_dtypes  # shipped with TensorFlow

    exp = expected_sum(7, 128, "bfloat16")  # sums up to 2 * 128 = 256, exact in bfloat16
    np.testing.assert_array_equal(exp.astype(ml_dtypes.bfloat16).astype(np.float64), exp)
    with pytest.raises(ValueError, match="overflow the exact integer range of bfloat16"):
        expected_sum(4, 300, "bfloat16")


def test_config_validation_and_dtype_names():
    assert canonical_dtype("half") == "float16" and canonical_dtype("float") == "float32"
    with pytest.raises(ValueError, match="dtype 'complex64' is not supported"):
        canonical_dtype("complex64")
    with pytest.raises(ValueError, match="iterations -n 0"):
        BenchConfig(sizes=(4,), iters=0)
    with pytest.raises(ValueError, match="strategies"):
        BenchConfig(sizes=(4,), strategies=("nccl",))
    assert BenchConfig(sizes=(2, 4, 1024), dtype="float32").counts() == [1, 256]
    with pytest.raises(ValueError, match=r"sizes \[3\] bytes are all below one float64 element \(8 bytes\)"):
        BenchConfig(sizes=(3,), dtype="float64")
    assert BenchConfig(sizes=(3, 30), dtype="float64").counts() == [3]


def test_markdown_table_picks_sizes_per_strategy():
    from horovod_torus.bench.report import markdown_table

    rows = [Row.from_times("torus", 1024, "float32", [1e-3, 1e-3], 0),
            Row.from_times("mpi", 1024, "float32", [2e-3, 2e-3], 0),
            Row.from_times("mpi", 2 ** 18, "float32", [1e-2, 1e-2], 0)]
    doc = bench_document(rows, world_size=2, grid="2x1", host={}, config={})
    lines = markdown_table(doc, [4096, 2 ** 20]).splitlines()
    assert lines[0] == ("| size | torus time (us) | torus busbw (GB/s) | mpi time (us) | mpi busbw (GB/s) |")
    assert lines[2] == "| 4KB | 1,000 | 0.004 | 2,000 | 0.002 |"
    assert lines[3] == "| 1MB | - | - | 10,000 | 0.105 |"
