#!/usr/bin/env bash
# run.sh PROGRAM [ARGS...]: runs PROGRAM (optimus-cc, occ_cuda_tests, mpirun, or any
# command) with the bundle's libraries and Open MPI (env.sh), e.g.
#   ./run.sh optimus-cc train --device cuda ...
#   ./run.sh mpirun -np 2 optimus-cc train --pipeline-model-parallel-size 2 ...
source "$(dirname "${BASH_SOURCE[0]}")/env.sh" || exit 1
(($#)) || { echo "usage: run.sh PROGRAM [ARGS...]" >&2; exit 2; }
exec "$@"
