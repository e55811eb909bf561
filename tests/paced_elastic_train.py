"""``python -m keras_app.train`` for the elastic scenario (:mod:`elastic_scenario`), paced while the world is shrunk.

While the job runs on fewer than 4 ranks, every training step sleeps :data:`PACE_S` seconds after it ends,
so that the 2-rank phase outlasts Horovod's add-back latency on any machine: the discovery script is polled
once a second, the lost host's blacklist cooldown is 1-3 s (``--blacklist-cooldown-range 1 3``), and the
survivors see the notification at their next commit. Without the pace a fast machine ran the remaining 88
steps in less than that, and the second world change came at the final commit (step 128 of 128) instead of
mid-run. Nothing else differs from ``python -m keras_app.train``: the callback only sleeps, on every rank
alike, and changes no state.
"""
import sys
import time

import keras

PACE_S = 0.15


class _Pace(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        import horovod_torus.tensorflow.keras as hvd

        if hvd.size() < 4:
            time.sleep(PACE_S)


_fit = keras.Model.fit


def _paced_fit(self, *args, callbacks=None, **kwargs):
    return _fit(self, *args, callbacks=[*(callbacks or []), _Pace()], **kwargs)


keras.Model.fit = _paced_fit

if __name__ == "__main__":
    from keras_app.train import main

    sys.exit(main())
