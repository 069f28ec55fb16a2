#!/usr/bin/env bash
# Run THERE (the device machine): the 50,000-decision table (session.sh's table50k, one GPU process per
# bandit) with the CUDA checks beside it in a second session.sh (its own log under $OUT/checks), so one
# ten-minute call does both; the checks are short, the table is host-bound and the machine has 16 cores.
#   run(command="GPU_SESSION_TABLE_LIMIT=480 bash experiments/gpu/table_and_checks.sh", carry=[".whl", ".gpu_data"])
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-experiments/results/gpu_session}"
export OUT
GPU_SESSION_TABLE_CPU="${GPU_SESSION_TABLE_CPU:-0}" GPU_SESSION_STEPS="environment table50k" \
  bash experiments/gpu/session.sh &
table=$!
sleep "${GPU_SESSION_CHECKS_DELAY:-5}"   # the first session.sh installs the wheels; the second waits for them
OUT="$OUT/checks" GPU_SESSION_SKIP_INSTALL=1 \
  GPU_SESSION_STEPS="${GPU_SESSION_CHECK_STEPS:-checks_cuda rmsprop_graph graph_recheck}" bash experiments/gpu/session.sh
wait "$table"
