#!/usr/bin/env bash
# Horovod 0.28.1's own TensorFlow 2 examples on horovod_torus and Keras 3, offline, on NP ranks (4) of this
# machine under mpirun and under horovodrun:
#   git clone --branch v0.28.1 https://github.com/horovod/horovod /path/to/horovod   (not shipped here)
#   bash mpi_scripts/horovod_examples.sh /path/to/horovod [OUT_DIR]
# Copies examples/tensorflow2/{tensorflow2_keras_mnist,tensorflow2_mnist,tensorflow2_synthetic_benchmark}.py
# into OUT_DIR/examples with the import swapped and the Keras 3 changes applied (tools/horovod_examples.py:
# one function per change), writes Fashion-MNIST (Debian's dataset-fashion-mnist) as the mnist-%d.npz files
# the MNIST examples load into OUT_DIR/keras/datasets (KERAS_HOME=OUT_DIR/keras: ~/.keras is not touched,
# nothing is downloaded), runs each example once per launcher from its own folder OUT_DIR/LAUNCHER/EXAMPLE
# (log.txt, checkpoints) and prints one summary line per run: the steps and rank 0's first/last loss,
# which must decrease (the benchmark logs no loss: its throughput lines must be there). Exits 1 when any
# run fails, 2 on a bad checkout. Steps (global, divided by NP in the files as Horovod's counts are):
#   KERAS_EPOCHS=3 KERAS_STEPS_PER_EPOCH=40 (Horovod: 24 x 500), TAPE_STEPS=200 (Horovod: 10000),
#   SYNTHETIC_ARGS (below; Horovod's default model ResNet50 at batch 32 is too slow for a CPU check).
# About 5 minutes on 2 busy cores. OUT_DIR defaults to a new temporary directory (kept: it holds the logs).
set -euo pipefail
src=${1:?usage: horovod_examples.sh HOROVOD_CHECKOUT [OUT_DIR]}
root=$(cd "$(dirname "$0")/.." && pwd)
out=${2:-$(mktemp -d -t horovod_examples.XXXXXX)}
mkdir -p "$out"; out=$(cd "$out" && pwd)
NP=${NP:-4}; PYTHON=${PYTHON:-$root/.venv/bin/python}; TIMEOUT=${TIMEOUT:-900}
SYNTHETIC_ARGS=${SYNTHETIC_ARGS:---model MobileNetV3Small --batch-size 2 --num-iters 2 \
--num-batches-per-iter 2 --num-warmup-batches 1 --no-cuda}
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" KERAS_HOME="$out/keras" PYTHONUNBUFFERED=1
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2} PYTHONWARNINGS=${PYTHONWARNINGS:-ignore}
export HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=${HOROVOD_STALL_SHUTDOWN_TIME_SECONDS:-300}
PATH="$(dirname "$PYTHON"):$PATH"   # horovodrun lives beside the interpreter

limits=(--epochs "${KERAS_EPOCHS:-3}" --steps-per-epoch "${KERAS_STEPS_PER_EPOCH:-40}"
        --steps "${TAPE_STEPS:-200}")
"$PYTHON" -m tools.horovod_examples prepare "$src" "$out/examples" "${limits[@]}" > /dev/null || exit 2
"$PYTHON" -m tools.horovod_examples data "$KERAS_HOME" --ranks "$NP" > /dev/null || exit 2

source "$root/mpi_scripts/launcher.sh"
read -r -a synthetic_args <<< "$SYNTHETIC_ARGS"
summary=(); fail=0
for launcher in mpirun horovodrun; do
  # mpirun: tag each rank's output (horovodrun does) and forward KERAS_HOME (horovodrun forwards everything)
  tag=(); [ "$launcher" = mpirun ] && tag=(--extra=--tag-output -x KERAS_HOME)
  for example in tensorflow2_keras_mnist.py tensorflow2_mnist.py tensorflow2_synthetic_benchmark.py; do
    args=(); [ "$example" = tensorflow2_synthetic_benchmark.py ] && args=("${synthetic_args[@]}")
    launcher_command cmd "$launcher" --local --np "$NP" "${tag[@]}" -- \
      "$PYTHON" "$out/examples/$example" "${args[@]}"
    run=$out/$launcher/${example%.py}; mkdir -p "$run"
    echo "horovod_examples.sh: ${cmd[*]}  (in $run)"
    set +e
    (cd "$run" && timeout "$TIMEOUT" "${cmd[@]}") > "$run/log.txt" 2>&1
    rc=$?
    line=$("$PYTHON" -m tools.horovod_examples check "$example" "$launcher" "$run/log.txt" --np "$NP" \
      --rc "$rc" "${limits[@]}")
    [ $? -eq 0 ] || fail=1
    set -e
    echo "$line"; summary+=("$line")
  done
done
echo "horovod_examples.sh: summary ($NP ranks; logs in $out)"
printf '%s\n' "${summary[@]}"
exit $fail
