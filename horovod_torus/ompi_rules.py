"""Open MPI's all-reduce algorithm for the torus' column communicators, chosen before MPI starts.

On Horovod's MPI path (``mpirun``, CPU tensors) the Horovod transport's phase 2 is ``MPI_Allreduce`` on the
column process set's communicator (Y ranks), and Open MPI 4.1's ``coll/tuned`` picks its algorithm per call
from the communicator's size and the message size (``coll_tuned_decision_fixed.c``). On the emulated
cluster that default ran the 4-rank column at about half a ring's speed (``docs/cluster_probes.md``), so
the torus over Horovod's process sets never beat Horovod's flat call there.

Open MPI lets a rules file replace that choice (``coll_tuned_use_dynamic_rules=1``,
``coll_tuned_dynamic_rules_filename``; read once, at ``MPI_Init``): per collective, per communicator size
(the rule of the nearest size less than or equal: ``ompi_coll_tuned_get_com_rule_ptr`` in
``coll_tuned_dynamic_rules.c``) and per message size; a rule's algorithm 0 falls back to the library's
own decision (``ompi_coll_tuned_allreduce_intra_dec_dynamic``). :func:`rules_text` gives ``MPI_Allreduce``
on every communicator smaller than the world (2 .. N-1 ranks) the ring from :data:`RING_FROM_BYTES` and
leaves the world's all-reduce (Horovod's flat call, ``MPI_Allreduce`` on ``MPI_COMM_WORLD``) and every
smaller message to the library. The torus' rows never all-reduce (phase 1 is ``MPI_Reduce_scatter``,
phase 3 ``MPI_Allgatherv``), so in a torus job the rule reaches the columns on every grid that has them
(1 < Y < N; on a 1 x N grid the column is the world, which keeps the library's choice); the file depends
on the world size only, the same on every rank.

What else it reaches: every blocking ``MPI_Allreduce`` of 256 KiB or more on a communicator of 2 .. N-1
ranks in the process, a user's own process sets and communicators included (Open MPI's ring does not
check that a user-defined reduction is commutative, as its default decision does: such a user should set
``OMPI_MCA_coll_tuned_use_dynamic_rules=0``). What it does not reach: non-blocking collectives
(``MPI_Iallreduce``: Open MPI's libnbc, not coll/tuned), so not the MPI transport's columns nor the numpy
API, whose column and flat calls are non-blocking or point-to-point (the numpy API's blocking flat call,
below 1 MiB, is on the world).

:func:`prepare` sets the two variables (and writes the file) when all of these hold, else changes nothing
and says why: launched by Open MPI's ``mpirun``; at least 3 ranks; MPI not started yet in this process
(``mpi4py.MPI`` not imported); none of :data:`USER_VARIABLES` set (a set one wins:
``OMPI_MCA_coll_tuned_use_dynamic_rules=0`` turns this off). ``horovod_torus.tensorflow.init`` calls it
before it starts MPI, and the ranks then compare :func:`describe` (what their MPI read) in the settings
agreement; a script that imports mpi4py before ``init`` may call :func:`prepare_for_job` first.
"""
from __future__ import annotations

import hashlib
import os
import sys
import tempfile

from horovod_torus.atomic import write_text_atomic

__all__ = ["ALLREDUCE", "RING", "RING_FROM_BYTES", "OWNER", "USER_VARIABLES", "rules_text", "prepare", "prepare_for_job",
           "describe", "active_file"]

#: Open MPI's collective id of MPI_Allreduce in a rules file (``COLLTYPE_T`` in ``coll_base_functions.h``).
ALLREDUCE = 2
#: ``coll_tuned_allreduce_algorithm`` 4: the ring (``ompi_coll_base_allreduce_intra_ring``).
RING = 4
#: Column shards from this many bytes take the ring; smaller ones the library's choice (the MPI
#: transport's own ring threshold, :data:`horovod_torus.mpi.RING_MIN_BYTES`).
RING_FROM_BYTES = 256 * 1024
#: Set by :func:`prepare` beside the two variables (the world size the file was made for): they are ours.
OWNER = "HOROVOD_TORUS_OMPI_RULES_WORLD"
#: The two variables :func:`prepare` sets.
_SET = ("OMPI_MCA_coll_tuned_use_dynamic_rules", "OMPI_MCA_coll_tuned_dynamic_rules_filename")
#: The variables of a user's own choice: any of them set (and not ours), :func:`prepare` does nothing.
USER_VARIABLES = ("OMPI_MCA_coll_tuned_use_dynamic_rules", "OMPI_MCA_coll_tuned_dynamic_rules_filename",
                  "OMPI_MCA_coll_tuned_allreduce_algorithm")


def rules_text(world_size: int, ring_from: int = RING_FROM_BYTES, algorithm: int = RING) -> str:
    """The rules file (Open MPI 4.1's format: numbers, ``#`` comments) that gives ``MPI_Allreduce`` on
    communicators of 2 .. ``world_size`` - 1 ranks the ring (``algorithm``: another
    ``coll_tuned_allreduce_algorithm`` number) from ``ring_from`` bytes (the whole message: count x type
    size), and the world, one rank and smaller messages the library's default.

    Raises:
        ValueError: ``world_size`` < 3 (no communicator between one rank and the world) or ``ring_from``
        < 1."""
    if world_size < 3 or ring_from < 1:
        raise ValueError(f"rules_text(world_size={world_size}, ring_from={ring_from}): a world of at least 3 "
                         f"ranks and a threshold of at least 1 byte")
    lines = ["1 # collectives with rules", f"{ALLREDUCE} # MPI_Allreduce", "3 # communicator sizes",
             "1 # from 1 rank", "1 # message sizes", "0 0 0 0 # any size: the library's choice",
             "2 # from 2 ranks (the torus columns)", "2 # message sizes",
             "0 0 0 0 # smaller: the library's choice",
             f"{ring_from} {algorithm} 0 0 # from {ring_from} bytes: algorithm {algorithm}",
             f"{world_size} # from the world's {world_size} ranks (the flat call)", "1 # message sizes",
             "0 0 0 0 # any size: the library's choice"]
    return "\n".join(lines) + "\n"


def prepare(world_size: int, environ=None, launcher: str = "mpirun", directory: str | None = None) -> str | None:
    """Point Open MPI at :func:`rules_text` for a world of ``world_size`` ranks before MPI starts in this
    process (the conditions: :mod:`horovod_torus.ompi_rules`). ``environ``: the environment to set
    (``os.environ``); ``launcher``: :attr:`horovod_torus.launch.LaunchContext.launcher`; ``directory``:
    where the file goes (default: ``horovod_torus_ompi_rules-<uid>`` in the temporary directory, this
    user's own, mode 0700).

    The variables this sets are marked with :data:`OWNER` (the world size they were made for): a child
    job that inherits them gets a file for its own world instead of being taken for a user's choice.

    Returns:
        None when the variables were set (the file written atomically and named by its content, so every
        rank of a node may write it; one already there is used only when its content is the same), else
        the reason nothing was changed (an unwritable folder included: the ranks' comparison at ``init``
        then raises on every rank when other ranks did get the file)."""
    environ = os.environ if environ is None else environ
    if launcher != "mpirun":
        return f"launched by {launcher}, not Open MPI's mpirun"
    if world_size < 3:
        return f"{world_size} rank(s): no communicator between one rank and the world"
    if "mpi4py.MPI" in sys.modules:
        return "MPI already started in this process (mpi4py.MPI imported before init)"
    ours = _SET if OWNER in environ else ()  # inherited from a parent job's prepare: remade below
    user = [v for v in USER_VARIABLES if v in environ and v not in ours]
    if user:
        return f"{user[0]}={environ[user[0]]!r} set: the user's choice"
    text = rules_text(world_size)
    directory = directory or os.path.join(tempfile.gettempdir(), f"horovod_torus_ompi_rules-{os.getuid()}")
    path = os.path.join(directory, f"allreduce-{hashlib.sha256(text.encode()).hexdigest()[:16]}.rules")
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        if not _holds(path, text):
            write_text_atomic(path, text)
    except OSError as exc:
        return f"the rules file could not be written ({exc})"
    environ["OMPI_MCA_coll_tuned_use_dynamic_rules"] = "1"
    environ["OMPI_MCA_coll_tuned_dynamic_rules_filename"] = path
    environ["HOROVOD_TORUS_OMPI_RULES_WORLD"] = str(world_size)  # OWNER
    return None


def _holds(path: str, text: str) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read() == text
    except OSError:
        return False


def prepare_for_job(context, environ=None) -> tuple:
    """:func:`prepare` for a job of ``context`` (a :class:`horovod_torus.launch.LaunchContext`): what
    ``init`` and the benchmark call before MPI starts.

    Returns:
        (the rules file's path, "") when set, else (None, why not)."""
    environ = os.environ if environ is None else environ
    why = prepare(context.size, environ, context.launcher)
    return (None, why) if why else (environ["OMPI_MCA_coll_tuned_dynamic_rules_filename"], "")


def describe(environ=None) -> str:
    """What this process's Open MPI reads of :data:`USER_VARIABLES` (a rules file by its name and a digest
    of its content), for the ranks to compare: an all-reduce rule on some ranks only would run different
    algorithms on the ranks of one communicator."""
    environ = os.environ if environ is None else environ
    parts = []
    for v in USER_VARIABLES:
        if v in environ:
            value = os.path.basename(environ[v])
            if v.endswith("_filename"):
                try:
                    with open(environ[v], "rb") as f:
                        value += f" ({hashlib.sha256(f.read()).hexdigest()[:12]})"
                except OSError:
                    value += " (unreadable)"
            parts.append(f"{v[len('OMPI_MCA_coll_tuned_'):]}={value}")
    return ", ".join(parts) or "library defaults"


def active_file(environ=None) -> str | None:
    """The rules file Open MPI reads in this process (``coll_tuned_use_dynamic_rules`` is ``1`` and a
    file is named), whoever set it, or None."""
    environ = os.environ if environ is None else environ
    if environ.get("OMPI_MCA_coll_tuned_use_dynamic_rules") == "1":
        return environ.get("OMPI_MCA_coll_tuned_dynamic_rules_filename") or None
    return None
