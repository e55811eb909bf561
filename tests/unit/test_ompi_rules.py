"""Open MPI's all-reduce rule for the torus columns (horovod_torus.ompi_rules): the file's content, when
prepare() sets it and when it leaves the environment alone, and, under a real mpirun, that Open MPI reads
the file and applies its rule to the communicators smaller than the world, from the threshold only."""
import hashlib
import os
import shutil
import subprocess
import sys

import pytest

from horovod_torus import ompi_rules
from horovod_torus.launch import LaunchContext


def _numbers(text):
    """The numbers of a rules file, comments dropped, as Open MPI's reader sees them."""
    return [int(w) for line in text.splitlines() for w in line.split("#")[0].split()]


def test_rules_give_every_communicator_below_the_world_the_ring_from_the_threshold():
    assert _numbers(ompi_rules.rules_text(8)) == [
        1, 2,  # one collective: MPI_Allreduce
        3,  # communicator sizes
        1, 1, 0, 0, 0, 0,  # from 1 rank: the library's choice
        2, 2, 0, 0, 0, 0, 262144, 4, 0, 0,  # from 2 ranks: the library's choice, the ring from 256 KiB
        8, 1, 0, 0, 0, 0]  # from the world's 8 ranks: the library's choice again
    assert _numbers(ompi_rules.rules_text(3, ring_from=1000, algorithm=6))[9:21] == [
        2, 2, 0, 0, 0, 0, 1000, 6, 0, 0, 3, 1]


@pytest.mark.parametrize("world_size, ring_from", [(2, 1024), (1, 1024), (4, 0)])
def test_rules_refuse_a_world_without_a_communicator_in_between(world_size, ring_from):
    with pytest.raises(ValueError, match=f"world_size={world_size}, ring_from={ring_from}"):
        ompi_rules.rules_text(world_size, ring_from)


@pytest.fixture
def no_mpi(monkeypatch):
    monkeypatch.delitem(sys.modules, "mpi4py.MPI", raising=False)


def test_prepare_sets_both_variables_and_writes_the_file_once(tmp_path, no_mpi):
    env = {}
    assert ompi_rules.prepare(8, env, "mpirun", str(tmp_path)) is None
    assert env["OMPI_MCA_coll_tuned_use_dynamic_rules"] == "1"
    path = env["OMPI_MCA_coll_tuned_dynamic_rules_filename"]
    assert os.path.dirname(path) == str(tmp_path) and open(path).read() == ompi_rules.rules_text(8)
    again = {}
    assert ompi_rules.prepare(8, again, "mpirun", str(tmp_path)) is None  # another rank of the node
    assert again["OMPI_MCA_coll_tuned_dynamic_rules_filename"] == path  # the same content, the same file
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(path)]
    digest = hashlib.sha256(ompi_rules.rules_text(8).encode()).hexdigest()[:12]
    assert ompi_rules.describe(env) == f"use_dynamic_rules=1, dynamic_rules_filename={os.path.basename(path)} ({digest})"
    assert ompi_rules.active_file(env) == path and ompi_rules.active_file({}) is None
    assert ompi_rules.active_file({**env, "OMPI_MCA_coll_tuned_use_dynamic_rules": "0"}) is None


@pytest.mark.parametrize("size, env, launcher, why", [
    (4, {}, "horovodrun", "launched by horovodrun"),
    (4, {}, "mpiexec", "not Open MPI's mpirun"),
    (2, {}, "mpirun", "2 rank(s): no communicator between one rank and the world"),
    (4, {"OMPI_MCA_coll_tuned_use_dynamic_rules": "0"}, "mpirun", "the user's choice"),
    (4, {"OMPI_MCA_coll_tuned_allreduce_algorithm": "3"}, "mpirun", "OMPI_MCA_coll_tuned_allreduce_algorithm='3'"),
])
def test_prepare_leaves_the_environment_alone_and_says_why(tmp_path, no_mpi, size, env, launcher, why):
    before = dict(env)
    assert why in ompi_rules.prepare(size, env, launcher, str(tmp_path))
    assert env == before and not os.listdir(tmp_path)


def test_prepare_is_too_late_once_mpi_started(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py.MPI", object())
    env = {}
    assert "MPI already started" in ompi_rules.prepare(4, env, "mpirun", str(tmp_path))
    assert env == {} and ompi_rules.describe(env) == "library defaults"


def test_prepare_for_job_takes_the_launchers_world(no_mpi, monkeypatch, tmp_path):
    monkeypatch.setattr(ompi_rules.tempfile, "gettempdir", lambda: str(tmp_path))
    env = {}
    path, why = ompi_rules.prepare_for_job(LaunchContext("mpirun", 8, 0, 2, 0), env)
    assert why == "" and open(path).read() == ompi_rules.rules_text(8)
    path, why = ompi_rules.prepare_for_job(LaunchContext("horovodrun", 8, 0, 2, 0), {})
    assert path is None and "horovodrun" in why


_PROBE = """
import sys
from mpi4py import MPI
import numpy as np
w = MPI.COMM_WORLD
pair = w.Split(w.rank % 2, w.rank)  # two communicators of 2 ranks (the rule's size)
three = w.Split(0 if w.rank < 3 else 1, w.rank)  # 3 ranks and 1
out = []
for name, c in (("world", w), ("pair", pair), ("three", three)):
    for n in (1024, 1 << 20):
        a = np.ones(n // 4, np.float32)
        b = np.empty_like(a)
        try:
            c.Allreduce(a, b)
            out.append(f"{name}:{n}:{int(b[0])}")
        except MPI.Exception:
            out.append(f"{name}:{n}:refused")
open(f"{sys.argv[1]}/rank{w.rank}.txt", "w").write(" ".join(out))  # the launcher's output interleaves
"""


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI's mpirun")
def test_open_mpi_reads_the_file_and_applies_the_rule_below_the_world_only(tmp_path):
    """A rule with an algorithm number Open MPI does not have (99) makes exactly the calls it reaches fail:
    on the communicators of 2 and 3 ranks from the threshold (256 KiB), not on the world (4 ranks), nor
    one rank, nor below the threshold."""
    rules = tmp_path / "probe.rules"
    rules.write_text(ompi_rules.rules_text(4, ring_from=ompi_rules.RING_FROM_BYTES, algorithm=99))
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMPI_MCA_coll_tuned")}
    env.update(OMPI_MCA_coll_tuned_use_dynamic_rules="1", OMPI_MCA_coll_tuned_dynamic_rules_filename=str(rules))
    done = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4", sys.executable, "-c",
                           _PROBE, str(tmp_path)], env=env, capture_output=True, text=True, timeout=120)
    for rank in range(4):
        assert (tmp_path / f"rank{rank}.txt").exists(), done.stdout + done.stderr
        line = (tmp_path / f"rank{rank}.txt").read_text()
        three = 3 if rank < 3 else 1
        big = "refused" if three == 3 else "1"
        assert line.split() == ["world:1024:4", "world:1048576:4", "pair:1024:2", "pair:1048576:refused",
                                f"three:1024:{three}", f"three:1048576:{big}"], line


def test_a_file_of_other_content_under_the_name_is_replaced(tmp_path, no_mpi):
    env = {}
    assert ompi_rules.prepare(4, env, "mpirun", str(tmp_path)) is None
    path = env["OMPI_MCA_coll_tuned_dynamic_rules_filename"]
    before = ompi_rules.describe(env)
    with open(path, "w") as f:
        f.write("1\n2\n1\n2\n1\n0 3 0 0\n")  # planted: recursive doubling for everything
    assert ompi_rules.describe(env) != before  # the ranks' comparison sees the content, not only the name
    assert ompi_rules.prepare(4, {}, "mpirun", str(tmp_path)) is None
    assert open(path).read() == ompi_rules.rules_text(4) and ompi_rules.describe(env) == before


def test_an_unwritable_folder_changes_nothing_and_says_why(tmp_path, no_mpi):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    env = {}
    why = ompi_rules.prepare(4, env, "mpirun", str(blocker / "rules"))
    assert why.startswith("the rules file could not be written") and env == {}


def test_variables_inherited_from_a_parent_job_are_remade_for_this_world(tmp_path, no_mpi):
    parent = {}
    assert ompi_rules.prepare(8, parent, "mpirun", str(tmp_path)) is None
    assert parent[ompi_rules.OWNER] == "8"
    child = dict(parent)  # a child job of 4 ranks started from a rank of the parent
    assert ompi_rules.prepare(4, child, "mpirun", str(tmp_path)) is None
    assert open(child["OMPI_MCA_coll_tuned_dynamic_rules_filename"]).read() == ompi_rules.rules_text(4)
    assert child[ompi_rules.OWNER] == "4"
    forced = {**parent, "OMPI_MCA_coll_tuned_allreduce_algorithm": "3"}  # the child's user forces one
    assert "the user's choice" in ompi_rules.prepare(4, forced, "mpirun", str(tmp_path))
