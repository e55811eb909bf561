# Sourced by the launch scripts (needs PYTHON, run from the repository root or with it on PYTHONPATH):
#   launcher_command ARRAY mpirun|horovodrun [options] -- PROGRAM [ARGS...]
# sets the array ARRAY to the command line `python -m horovod_torus.launchers` builds from the options
# (the one builder of mpirun / horovodrun command lines and of the variables they forward, see
# docs/launchers.md); when the builder refuses the options it prints why and the script exits 2.
# shellcheck shell=bash

launcher_command() {
  local -n launcher_command_out=$1
  local launcher_command_text
  shift
  launcher_command_text=$("$PYTHON" -m horovod_torus.launchers "$@") || exit 2
  eval "launcher_command_out=($launcher_command_text)"   # shlex-quoted words: safe to eval
}
