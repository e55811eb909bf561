"""python -m horovod_torus.doctor on every rank of a real launch: one OK line per rank (rank 0 prints them
in rank order), the launch's grid and transport, local ranks as the launcher placed them, exit status 0.
DOCTOR_STEP_BATCH (launches.tsv; default 8) is the doctor's ``--step-batch``: 0 skips the timed ResNet-50
step (a minute of tracing in 4 processes on 2 cores), which one launch measures for all."""
import os
import re


def test_doctor_all_ranks_ok(hvd, world, capsys):
    from horovod_torus.bench.world import allocator, cpu_model
    from horovod_torus.doctor import main
    from horovod_torus.tf_defaults import onednn_enabled
    size, rank = world
    step_batch = int(os.environ.get("DOCTOR_STEP_BATCH", "8"))
    assert main(["--step-batch", str(step_batch)]) == 0
    out = capsys.readouterr().out.splitlines()
    if rank == 0:
        lines = [l for l in out if l.startswith("doctor: rank ")]
        assert len(lines) == size
        grid = os.environ["HOROVOD_TORUS_GRID"]
        for r, line in enumerate(lines):
            m = re.match(rf"doctor: rank {r}/{size} host \S+ local (\d+)/(\d+) gpu none \(CPU\) \| built (\S+) \| "
                         rf"controller (MPI|Gloo), MPI threads [^|]+ \| grid {grid}, transport (mpi|horovod) \| "
                         rf"cpu (.+), oneDNN (on|off), malloc (\S+), TF threads intra \S+/inter \S+, ResNet-50 step "
                         rf"(skipped|([0-9.]+) images/s) \| OK$", line)
            assert m, line
            assert m.group(6) == cpu_model() and m.group(7) == ("on" if onednn_enabled() else "off")
            assert m.group(8) == allocator()
            if step_batch == 0:
                assert m.group(9) == "skipped", line
            else:
                assert float(m.group(10)) > 0, line
            assert int(m.group(1)) == r % int(m.group(2)) and "Gloo" in m.group(3).split(",")
        assert out[-1].startswith(f"doctor: {size} of {size} ranks OK, grid {grid}")
    else:
        assert out == []
