"""The elastic torus's pure parts, in one process: the alltoall splits of its transport, the per-rank
share of a global batch, which errors reset and which end the job, the launch check, the agreement's
rendezvous scope, the Keras 3 state's commit/restore, and the re-binding of a reducer to a new torus."""
import http.server
import json
import threading

import keras
import numpy as np
import pytest
import tensorflow as tf
from horovod.common.exceptions import HorovodInternalError

from horovod_torus.agreement import agree
from horovod_torus.launch import LaunchContext
from horovod_torus.stall import TorusStallError
from horovod_torus.tensorflow import elastic, gradients, runtime
from horovod_torus.tensorflow.elastic_transport import peer_splits
from horovod_torus.topology import TorusTopology
from keras_app.elastic import rank_share

GLOO = {"HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1", "HOROVOD_GLOO_RENDEZVOUS_PORT": "1", "HOROVOD_SIZE": "4",
        "HOROVOD_RANK": "1", "HOROVOD_LOCAL_SIZE": "2", "HOROVOD_LOCAL_RANK": "1"}


def test_peer_splits_send_only_to_the_peers():
    grid = TorusTopology.parse("3x2")
    assert peer_splits(grid, grid.rows()[1], [2, 1, 1]) == [0, 0, 0, 2, 1, 1]
    assert peer_splits(grid, grid.columns()[2], [5, 5]) == [0, 0, 5, 0, 0, 5]
    with pytest.raises(ValueError, match="2 peers but 3 counts"):
        peer_splits(grid, (0, 1), [1, 1, 1])
    with pytest.raises(ValueError, match=r"peers \[3, 0\] must be distinct ascending ranks in \[0, 6\)"):
        peer_splits(grid, (3, 0), [1, 1])


@pytest.mark.parametrize("batch,size,want", [(512, 3, [(0, 171), (171, 171), (342, 170)]),
                                             (128, 4, [(0, 32), (32, 32), (64, 32), (96, 32)]),
                                             (5, 2, [(0, 3), (3, 2)])])
def test_rank_share_splits_a_global_batch_of_any_size(batch, size, want):
    shares = [rank_share(batch, size, r) for r in range(size)]
    assert shares == want
    assert sum(c for _, c in shares) == batch


def test_rank_share_needs_a_sample_per_rank():
    with pytest.raises(ValueError, match="global batch 3 < 4 ranks"):
        rank_share(3, 4, 0)


def _chained(outer, inner):
    try:
        try:
            raise inner
        except Exception as exc:
            raise outer from exc
    except Exception as exc:
        return exc


@pytest.mark.parametrize("exc,lost", [
    (HorovodInternalError("x"), True),
    (tf.errors.UnknownError(None, None, "HorovodAlltoall: Horovod has been shut down. This was caused by ..."),
     True),
    (RuntimeError("Read error [127.0.0.1]:420: Connection reset by peer"), True),
    (_chained(RuntimeError("fit failed"), tf.errors.UnknownError(None, None, "Connection closed by peer")), True),
    (tf.errors.UnknownError(None, None, "[gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 20000ms for "
                            "recv operation to complete [Op:HorovodAllreduce]"), True),
    (RuntimeError("Horovod background loop uncaught exception: Application timeout caused pair closure"), True),
    (TorusStallError("call 3 'x': ranks [2] did not arrive; Horovod has been shut down"), False),
    (ValueError("bad input"), False),
    (tf.errors.InvalidArgumentError(None, None, "Number of entries in splits does not equal number of workers"),
     False),
])
def test_only_a_lost_rank_resets(exc, lost):
    assert elastic.is_rank_lost(exc) is lost


def test_elastic_needs_an_elastic_horovodrun():
    with pytest.raises(ValueError, match="started by 'mpirun'.*cannot grow or shrink"):
        elastic.check_elastic_launch({"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "0"})
    with pytest.raises(ValueError, match="started by 'horovodrun'"):
        elastic.check_elastic_launch(GLOO)
    elastic.check_elastic_launch({**GLOO, "HOROVOD_ELASTIC": "1"})
    assert LaunchContext.from_environ({**GLOO, "HOROVOD_ELASTIC": "1"}).elastic
    assert not LaunchContext.from_environ({**GLOO, "HOROVOD_ELASTIC": "0"}).elastic


def test_run_raises_before_any_collective_outside_an_elastic_launch(monkeypatch):
    monkeypatch.delenv("HOROVOD_ELASTIC", raising=False)
    called = []
    wrapped = elastic.run(lambda state: called.append(state))
    with pytest.raises(ValueError, match="elastic horovodrun launch"):
        wrapped(object())
    assert called == []


def test_elastic_init_refuses_process_sets_before_horovod_starts(monkeypatch):
    for k, v in {**GLOO, "HOROVOD_ELASTIC": "1"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(runtime._hvd, "init", lambda **kw: pytest.fail("Horovod must not start"))
    with pytest.raises(ValueError, match="global set only"):
        runtime.init(process_sets=[object()])


class _Store(http.server.BaseHTTPRequestHandler):
    data, paths = {}, []

    def do_PUT(self):
        self.data[self.path] = self.rfile.read(int(self.headers["Content-Length"]))
        self.paths.append(self.path)
        self.send_response(200)
        self.end_headers()

    def do_GET(self):
        body = self.data.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.end_headers()
        if body is not None:
            self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_agreement_uses_the_given_rendezvous_scope():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Store)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    environ = {"HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1", "HOROVOD_GLOO_RENDEZVOUS_PORT": str(server.server_port)}
    results = [None, None]

    def rank(r):
        results[r] = agree({"grid": "2x1", "size": 2}, rank=r, size=2, environ=environ, timeout=20,
                           scope="horovod_torus_elastic_2")

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    [t.start() for t in threads]
    [t.join(30) for t in threads]
    server.shutdown()
    assert results[0] == results[1] == [{"grid": "2x1", "size": 2}] * 2
    assert sorted(_Store.paths) == ["/horovod_torus_elastic_2/0", "/horovod_torus_elastic_2/1"]
    assert json.loads(_Store.data["/horovod_torus_elastic_2/1"]) == {"grid": "2x1", "size": 2}


def _model():
    keras.utils.set_random_seed(5)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.BatchNormalization()])
    model.compile(optimizer=keras.optimizers.Adam(0.1), loss="mse")
    return model


def test_keras_state_builds_the_optimizer_and_restores_the_last_commit():
    model = _model()
    state = elastic.KerasState(model, epoch=0, batch=0)
    assert model.optimizer.built and len(model.optimizer.variables) > 1
    x, y = np.ones((4, 3), np.float32), np.zeros((4, 2), np.float32)
    model.fit(x, y, epochs=1, verbose=0)
    state.batch = 1
    state.save()                                   # a commit, without the host check (needs Horovod)
    committed = [v.numpy().copy() for v in state.variables()]
    digest = state.digest()
    model.fit(x, y, epochs=2, verbose=0)
    state.batch, state.epoch = 3, 1
    assert state.digest() != digest and int(model.optimizer.iterations.numpy()) == 3
    state.restore()
    assert (state.epoch, state.batch) == (0, 1) and state.digest() == digest
    assert int(model.optimizer.iterations.numpy()) == 1
    for v, c in zip(state.variables(), committed):
        np.testing.assert_array_equal(v.numpy(), c)


def test_keras_state_reset_drops_the_compiled_step():
    model = _model()
    state = elastic.KerasState(model, batch=0)
    model.fit(np.ones((4, 3), np.float32), np.zeros((4, 2), np.float32), verbose=0)
    assert model.train_function is not None
    state.reset()
    assert model.train_function is None


def test_keras_state_needs_a_built_model_and_commit_every_a_count():
    with pytest.raises(ValueError, match="is not built"):
        elastic.KerasState(keras.Sequential([keras.layers.Dense(2)]))
    state = elastic.KerasState(_model(), batch=0)
    with pytest.raises(ValueError, match="every N >= 1"):
        elastic.CommitEvery(state, 0)
    with pytest.raises(ValueError, match="no 'batch' value"):
        elastic.CommitEvery(elastic.KerasState(_model()), 2)


def test_a_reducer_binds_the_new_torus_after_a_reset(monkeypatch):
    calls = []
    monkeypatch.setattr(gradients, "resolve_strategy", lambda name: calls.append(name) or (lambda *a: a))
    reducer = gradients.GradientReducer(gradients.ReductionOptions())
    first = reducer.strategy
    assert reducer.strategy is first and len(calls) == 1
    monkeypatch.setitem(runtime._current, "generation", runtime.generation() + 1)
    assert reducer.strategy is not first and len(calls) == 2


def test_elastic_demo_plot_draws_the_loss_and_world_size(tmp_path):
    from tools.cluster.elastic_demo import plot_elastic

    (tmp_path / "elastic").mkdir()
    rows = [{"time": t, "step": 4 * i, "size": s, "changes": c, "loss": 2.0 - 0.1 * i}
            for i, (t, s, c) in enumerate([(1, 4, 0), (2, 4, 0), (9, 2, 1), (10, 2, 1), (15, 4, 2)])]
    (tmp_path / "elastic" / "progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    changes = [{"time": 8, "step": 8, "old_size": 4, "old_grid": "2x2", "new_size": 2, "new_grid": "2x1"},
               {"time": 14, "step": 12, "old_size": 2, "old_grid": "2x1", "new_size": 4, "new_grid": "2x2"}]
    (tmp_path / "summary.json").write_text(json.dumps({"world_changes": changes}))
    plot_elastic(str(tmp_path), str(tmp_path / "elastic.png"))
    assert (tmp_path / "elastic.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_elastic_app_configuration(monkeypatch, capsys):
    from keras_app.train import CONFIG_ERROR, configure, main

    cfg, notes = configure(["--elastic", "true", "--batch-schedule", "0:512"], size=3)   # 171, 171, 170
    assert cfg.train.elastic and cfg.train.batch_schedule == "0:512" and notes == []
    for argv, match in ((["--grid", "2x2"], "leave --grid unset"), (["--resume", "true"], "leave --resume unset"),
                        (["--commit-every", "0"], "commit_every=0 must be >= 1")):
        with pytest.raises(ValueError, match=match):
            configure(["--elastic", "true", *argv], size=4)
    for k in ("HOROVOD_ELASTIC", "HOROVOD_GLOO_RENDEZVOUS_ADDR"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "0")
    assert main(["--elastic", "true"]) == CONFIG_ERROR
    assert "needs an elastic horovodrun launch" in capsys.readouterr().err


def test_records_leave_out_a_line_still_being_written(tmp_path):
    from keras_app.elastic import records

    assert records(str(tmp_path), "ranks") == []
    (tmp_path / "elastic").mkdir()
    (tmp_path / "elastic" / "ranks.jsonl").write_text('{"rank": 0}\n{"rank": 1}\n{"ra')
    assert records(str(tmp_path), "ranks") == [{"rank": 0}, {"rank": 1}]


def test_horovods_state_names_and_keras_callbacks_work_with_the_import_swapped():
    """A script written for horovod.tensorflow(.keras).elastic finds its names: TensorFlowState and ObjectState
    (Horovod's own), TensorFlowKerasState (our Keras 3 state with Horovod's signature, backend unused), and
    Horovod's Keras callbacks, which drive our KerasState's batch, epoch and commits."""
    import horovod.common.elastic
    import horovod.tensorflow.elastic

    from horovod_torus.tensorflow.keras import elastic as kelastic

    assert elastic.TensorFlowState is horovod.tensorflow.elastic.TensorFlowState
    assert elastic.ObjectState is horovod.common.elastic.ObjectState
    model = _model()
    state = elastic.TensorFlowKerasState(model, None, "unused-backend", epoch=5, batch=0)
    assert isinstance(state, elastic.KerasState) and state.optimizer is model.optimizer and state.epoch == 5
    commits = []
    state.commit = lambda: commits.append((state.epoch, state.batch))   # the host check needs a running job
    callbacks = [kelastic.UpdateBatchStateCallback(state), kelastic.UpdateEpochStateCallback(state),
                 kelastic.CommitStateCallback(state, batches_per_commit=2)]
    model.fit(np.ones((8, 3), np.float32), np.zeros((8, 2), np.float32), batch_size=2, epochs=2, verbose=0,
              callbacks=callbacks)
    # 4 batches an epoch: commits after batches 2 and 4 and at each epoch's end; the epoch counts on from 5
    assert commits == [(5, 1), (5, 3), (6, 0), (6, 1), (6, 3), (7, 0)], commits
