#!/usr/bin/env bash
# Run THERE (the device machine), from the repository root. Prepare first with
# experiments/gpu/prepare.sh, then (docs/speed.md, "GPU"), e.g.
#
#   run(command="GPU_SESSION_STEPS='environment graph_recheck full_trial concurrency_small' \
#       bash experiments/gpu/session.sh", carry=[".whl", ".gpu_data"], timeout_s=560)
#
# Steps (each with its own time limit; the next one runs whatever happened), by group:
#   session 17's calls 1-3: environment cuda_tests bench projection concurrency sync_probe graph_probe
#     bandit_timing mushroom_timing;
#   its call 4 (CUDA graphs): graph_tests bench_graphs bench_eager bandit_graphs concurrency_graphs;
#   session 18: graph_threads refit_profile threads_alone threads_piece; call 2: trial_tests table50k;
#   session 28 (H100): environment trial_tests graph_memory table50k (found and fixed the shared-pool
#     capture failure; the six groups in one process were host-bound);
#   session 34 (H200): table50k with checks_cuda rmsprop_graph graph_recheck beside it (table_and_checks.sh), then
#     fsvgd_eigh refit_profile_batched: bootstrap and mfvi rows finished in 5.5-6.8 min, fsvgd reached 30,000;
#   next: table50k with GPU_SESSION_TABLE_POSTERIORS=fsvgd (f-SVGD's row alone, one process per bandit), or
#     refit_profile_batched (its refit counter fixed after session 34), then table50k_rest;
#   session 37 (H200): fsvgd's 50k row (table_and_checks.sh), cuda_tests graph_tests, refit_profile_batched;
#   next (session 38's change): fsvgd_clip, then table50k_rest (or table50k for fsvgd with the faster clip);
#   not run yet: graph_recheck full_trial concurrency_small (and bench_graphs / bench_eager / bandit_graphs
#     again: point estimates and the staged fsvgd / svgd steps have not been captured on a GPU yet).
# A next call that fits in one 10-minute command: GPU_SESSION_STEPS="environment graph_recheck
#   bench_graphs bench_eager full_trial concurrency_small".
# GPU_SESSION_STEPS="a b" runs only those (default: all, far more than one call's 10 minutes).
# Everything lands in $OUT: session.log (all output and a summary line per step) and each step's
# JSON / CSV. Without $OUT (a dry run anywhere) it writes to experiments/results/gpu_session;
# GPU_SESSION_DEVICE=cpu GPU_SESSION_QUICK=1 runs the same steps, small, on a CPU.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-experiments/results/gpu_session}"
mkdir -p "$OUT"
DEVICE="${GPU_SESSION_DEVICE:-cuda}"
QUICK="${GPU_SESSION_QUICK:-0}"
LOG="$OUT/session.log"
export PYTHONUNBUFFERED=1 GIT_PYTHON_REFRESH=quiet
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# a second session.sh started beside a first (GPU_SESSION_SKIP_INSTALL=1) never installs: it waits (up to
# 120 s) for the first's finished install, marked by /tmp/site/.installed, and reuses it
if [ "${GPU_SESSION_SKIP_INSTALL:-0}" = 1 ]; then
  for _ in $(seq 120); do [ -f /tmp/site/.installed ] && break; sleep 1; done
  [ -f /tmp/site/.installed ] || echo "GPU_SESSION_SKIP_INSTALL: no finished install in /tmp/site" | tee -a "$LOG"
  export PYTHONPATH="$PYTHONPATH:/tmp/site"
elif ls .whl/*.whl >/dev/null 2>&1; then
  rm -f /tmp/site/.installed
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && touch /tmp/site/.installed && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
if [ -d .gpu_data/mushroom ]; then export UNCERTAIN_AGENTS_DATA="$PWD/.gpu_data"; fi

# GPU_SESSION_STEPS="concurrency bandit_timing" runs only those steps (default: all of them)
STEPS_WANTED="${GPU_SESSION_STEPS:-all}"
step() {  # step NAME LIMIT_SECONDS COMMAND...
  local name=$1 limit=$2; shift 2
  if [ "$STEPS_WANTED" != all ] && [[ " $STEPS_WANTED " != *" $name "* ]]; then return 0; fi
  local start=$SECONDS
  echo "===== $name (limit ${limit} s): $*" >> "$LOG"
  timeout "$limit" "$@" >> "$LOG" 2>&1
  local rc=$?
  echo "----- $name: rc=$rc, $((SECONDS - start)) s" | tee -a "$LOG"
}

if [ "$QUICK" = 1 ]; then ROUNDS=1; STEPS=3; DECISIONS=60; MUSHROOM_DECISIONS=30; FULL_DECISIONS=60; else ROUNDS=3; STEPS=30; DECISIONS=1000; MUSHROOM_DECISIONS=300; FULL_DECISIONS=50000; fi

step environment 30 bash -c "nvidia-smi -L 2>/dev/null; python3 -c 'import torch, sys; print(sys.version); \
print(torch.__version__, torch.cuda.is_available() and torch.cuda.get_device_name())'; nproc"
# CUDA tests: tests/test_cuda.py (marked) and the device-parametrised interface and attack tests
step cuda_tests 120 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/test_interface.py \
  tests/test_attacks.py tests/test_checks.py -k cuda
# check_posterior on CUDA for every method (session 31; about 11 short checks)
step checks_cuda 60 python3 -m pytest -q -p no:cacheprovider tests/test_checks.py -k cuda
step bench 100 python3 -m uncertain_agents.cli bench --device "$DEVICE" --network bandit --rounds "$ROUNDS" \
  --steps "$STEPS" --out "$OUT/bench_cuda_bandit.json"
step projection 90 python3 experiments/gpu_projection.py --device "$DEVICE" --rounds "$ROUNDS" --steps "$STEPS" \
  --out "$OUT/gpu_projection_cuda.json"
# how the steps of P processes (one per trial, as bandit_table.py --workers runs them) share the device
if [ "$QUICK" = 1 ]; then CONFIGS=fsvgd:1,mixed:2; else CONFIGS=fsvgd:1,fsvgd:4,fsvgd:10,mixed:15; fi
CONFIGS="${GPU_SESSION_CONFIGS:-$CONFIGS}"
step concurrency 150 python3 experiments/gpu_concurrency.py --device "$DEVICE" --configs "$CONFIGS" \
  --steps "$((STEPS * 20))" --out "$OUT/gpu_concurrency_cuda.json"
# which operations of a step wait for the device; what a CUDA graph saves on a stack of 1/20/200 networks
step sync_probe 60 python3 experiments/gpu_sync_probe.py --out "$OUT/gpu_sync_probe.json"
step graph_probe 60 python3 experiments/gpu_graph_probe.py --out "$OUT/gpu_graph_probe.json"
# a timed piece of the 50,000-step table: the first 1,000 decisions of one trial of the fsvgd-paper
# preset on the wheel (20 refits, 2,000 -> 100 steps: about 21,000 of a trial's 119,950 steps)
TABLE=/tmp/gpu_session_bandit
step bandit_timing 150 python3 experiments/bandit_table.py --envs wheel --steps "$DECISIONS" --trials 1 \
  --protocol fsvgd-paper --device "$DEVICE" --workers 3 \
  --only "thompson[fsvgd],thompson[bootstrap],thompson[mfvi]" --posteriors fsvgd,bootstrap,mfvi --out "$TABLE"
cp "$TABLE/bandit_runs.csv" "$TABLE/bandit_table.md" "$OUT/" 2>/dev/null
# the same preset on the mushroom bandit (117-dimensional contexts), its first 300 decisions
MUSH=/tmp/gpu_session_mushroom
step mushroom_timing 60 python3 experiments/bandit_table.py --envs mushroom --steps "$MUSHROOM_DECISIONS" --trials 1 \
  --protocol fsvgd-paper --device "$DEVICE" --workers 3 \
  --only "thompson[fsvgd],thompson[bootstrap],thompson[mfvi]" --posteriors fsvgd,bootstrap,mfvi --out "$MUSH"
cp "$MUSH/bandit_runs.csv" "$OUT/bandit_runs_mushroom.csv" 2>/dev/null

# ---- CUDA-graph training steps (posteriors/cuda_graphs.py, on by default on CUDA): tests, then the
# same measurements with graphs on and off (UNCERTAIN_AGENTS_CUDA_GRAPHS=0), on the same machine
GRAPHS="env UNCERTAIN_AGENTS_CUDA_GRAPHS=1"
EAGER="env UNCERTAIN_AGENTS_CUDA_GRAPHS=0"
GRAPH_POSTERIORS="mfvi bb-alpha bootstrap ensemble:n_members=20 map fsvgd fsvgd:noise_std=0.1 svgd:noise_std=0.1"
step graph_tests 90 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/test_cuda_graph_wiring.py
step bench_graphs 60 $GRAPHS python3 -m uncertain_agents.cli bench --device "$DEVICE" --network bandit \
  --rounds "$ROUNDS" --steps "$((STEPS * 10 / 3))" --posteriors $GRAPH_POSTERIORS --out "$OUT/bench_cuda_graphs.json"
step bench_eager 60 $EAGER python3 -m uncertain_agents.cli bench --device "$DEVICE" --network bandit \
  --rounds "$ROUNDS" --steps "$((STEPS * 10 / 3))" --posteriors $GRAPH_POSTERIORS --out "$OUT/bench_cuda_eager.json"
GT=/tmp/gpu_session_graphs
step bandit_graphs 80 $GRAPHS python3 experiments/bandit_table.py --envs wheel --steps "$DECISIONS" --trials 1 \
  --protocol fsvgd-paper --device "$DEVICE" --workers 2 \
  --only "thompson[bootstrap],thompson[mfvi]" --posteriors bootstrap,mfvi --out "$GT"
cp "$GT/bandit_runs.csv" "$OUT/bandit_runs_graphs.csv" 2>/dev/null
step concurrency_graphs 60 $GRAPHS python3 experiments/gpu_concurrency.py --device "$DEVICE" \
  --configs "${GPU_SESSION_GRAPH_CONFIGS:-bootstrap:1,mfvi:1,mixed:15}" --steps "$((STEPS * 20))" \
  --out "$OUT/gpu_concurrency_graphs.json"

# ---- for the next session with a GPU (none of these has run yet): the point estimates' capture
# (fixed after session 17's call 4), one whole 50,000-decision trial of the preset with graphs
# (bootstrap and mfvi, about 1.5-3 minutes each, projected), and how few processes share the device
step graph_recheck 60 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py -k "graph"
FT=/tmp/gpu_session_full_trial
step full_trial 300 python3 experiments/bandit_table.py --envs wheel --steps "$FULL_DECISIONS" --trials 1 \
  --protocol fsvgd-paper --device "$DEVICE" --workers 3 \
  --only "thompson[bootstrap],thompson[mfvi],thompson[fsvgd]" --posteriors bootstrap,mfvi,fsvgd --out "$FT"
cp "$FT/bandit_runs.csv" "$OUT/bandit_runs_full_trial.csv" 2>/dev/null
step concurrency_small 90 python3 experiments/gpu_concurrency.py --device "$DEVICE" \
  --configs bootstrap:1,bootstrap:2,bootstrap:4,mixed:3 --steps "$((STEPS * 20))" \
  --out "$OUT/gpu_concurrency_small.json"

# ---- session 18: runs side by side as threads of one process, one CUDA stream each
# (agents/experiment.py parallel="threads"; bandit_table.py --parallel threads)
step graph_threads 90 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py -k "graph or thread"
# host time of steady-state refits (100 steps each), per method, with its cProfile
step refit_profile 60 python3 experiments/gpu_refit_profile.py --device "$DEVICE" --decisions "$((DECISIONS / 2))" \
  --out "$OUT/refit_profile.json"
# one trial of each method, three threads: the rate of a run with little contention
TA=/tmp/gpu_session_threads_alone
step threads_alone 60 python3 experiments/bandit_table.py --envs wheel --steps "$DECISIONS" --trials 1 \
  --protocol fsvgd-paper --device "$DEVICE" --workers 3 --parallel threads --log-every 250 \
  --only "thompson[bootstrap],thompson[mfvi],thompson[fsvgd]" --posteriors bootstrap,mfvi,fsvgd --out "$TA"
cp "$TA/bandit_runs.csv" "$OUT/bandit_runs_threads_alone.csv" 2>/dev/null
# ten trials of each method, thirty threads (what the 50,000-step table runs), first 2,000 decisions
TP=/tmp/gpu_session_threads_piece
step threads_piece 170 python3 experiments/bandit_table.py --envs wheel --steps "$((DECISIONS * 2))" --trials 10 \
  --protocol fsvgd-paper --device "$DEVICE" --workers 30 --parallel threads --log-every 250 \
  --only "thompson[bootstrap],thompson[mfvi],thompson[fsvgd]" --posteriors bootstrap,mfvi,fsvgd --out "$TP"
cp "$TP/bandit_runs.csv" "$OUT/bandit_runs_threads_piece.csv" 2>/dev/null

# ---- the 50,000-decision table, every Thompson agent's ten trials as one trial-batched model in
# lock step (--parallel batched). Session 18's call 2 ran the two bandits in two processes, which
# time-slice the device; now both bandits' six groups are threads of one process (streams of one
# context overlap). LinFullPost and Uniform in CPU worker processes beside them.
step trial_tests 60 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py -k "trial"
# the posterior's one memory pool for all its graphs (call 2 found per-capture pools piling up to 126 GiB)
step graph_memory 60 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py -k "memory_pool or thread or graph"
# session 19: Thompson decisions a window at a time on the device against one at a time on the host
step decisions 60 python3 experiments/lockstep_decisions.py --device "$DEVICE" --rounds "$((ROUNDS * 3))" \
  --out "$OUT/lockstep_decisions_cuda.json"
# session 28: where a batched group's host time goes (cProfile of ten lock-step trials, 1,000 decisions, 100-step refits)
# session 29: the preset bootstrap (TF RMSProp with an inverse-time decay) captured and replayed like Adam methods
step rmsprop_graph 60 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py -k "rmsprop or captures_its_step"
step refit_profile_batched 120 python3 experiments/gpu_refit_profile.py --device "$DEVICE" --trials 10 --env mushroom \
  --decisions "$DECISIONS" --methods mfvi,bootstrap,fsvgd --out "$OUT/refit_profile_batched.json"
# session 30: f-SVGD's per-step eigen-clip on the host (the default now) against cuSOLVER on the device, ten
# batched mushroom trials each, same machine
step fsvgd_eigh 150 bash -c "python3 experiments/gpu_refit_profile.py --device $DEVICE --trials 10 --env mushroom \
  --decisions $DECISIONS --methods fsvgd --host-eigh-max-dim 0 --out $OUT/fsvgd_eigh_device.json | head -n 3; \
  python3 experiments/gpu_refit_profile.py --device $DEVICE --trials 10 --env mushroom \
  --decisions $DECISIONS --methods fsvgd --out $OUT/fsvgd_eigh_host.json | head -n 3"
# session 38: f-SVGD's clip by matrix products inside the step's graph (function_prior.STEP_CLIP = "iterative",
# no synchronisation per step) against the eager host clip, ten batched trials on each bandit, alternated, with
# its CUDA tests first. If "iterative" is faster, run the table with it: UNCERTAIN_AGENTS_STEP_CLIP=iterative
# GPU_SESSION_STEPS=table50k ... (the variable reaches every process the table starts).
step fsvgd_clip 360 bash -c "python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py -k 'iterative or clipped_precision'; \
  for env in mushroom wheel; do for clip in eager iterative eager iterative; do \
    name=fsvgd_clip_\${env}_\${clip}_\$SECONDS; \
    python3 experiments/gpu_refit_profile.py --device $DEVICE --trials 10 --env \$env --decisions $DECISIONS \
      --methods fsvgd --step-clip \$clip --top 12 --out $OUT/\$name.json > $OUT/\$name.log 2>&1; \
    echo \"\$clip: \$(grep -m 1 '^==' $OUT/\$name.log)\"; \
  done; done"
TABLE_LIMIT="${GPU_SESSION_TABLE_LIMIT:-480}"
TB="$OUT/table50k"
# one GPU process per entry of GPU_SESSION_TABLE_PROCESSES (default: one per bandit, its three groups as
# threads; session 28 ran all six groups in one process and found them host-bound, sharing one GIL):
# "wheel,mushroom" gives the single process again
TABLE_PROCESSES="${GPU_SESSION_TABLE_PROCESSES:-wheel mushroom}"
# which posteriors' groups the table runs (default: the issue's three), e.g. GPU_SESSION_TABLE_POSTERIORS=fsvgd
TABLE_POSTERIORS="$(echo "${GPU_SESSION_TABLE_POSTERIORS:-fsvgd,bootstrap,mfvi}" | tr -d ' ')"
# GPU_SESSION_TABLE_SPLIT=posterior (session 38): one process per bandit *and* posterior (six by default), each
# writing its own folder gpu_<bandit>_<posterior>, so no group waits for another's host work under one GIL
# (session 37: f-SVGD alone ran nearly twice as fast as beside the other two groups in one process)
if [ "${GPU_SESSION_TABLE_SPLIT:-bandit}" = posterior ]; then
  TABLE_GROUPS="$(echo "$TABLE_POSTERIORS" | tr ',' ' ')"
else
  TABLE_GROUPS="$TABLE_POSTERIORS"
fi
TABLE_JOBS=""
for envs in $TABLE_PROCESSES; do for group in $TABLE_GROUPS; do
  name="gpu_${envs/,/_}"
  [ "$group" = "$TABLE_POSTERIORS" ] || name="${name}_${group//,/_}"
  TABLE_JOBS="$TABLE_JOBS $envs:$group:$name"
done; done
step table50k "$((TABLE_LIMIT + 20))" bash -c "
  for job in $TABLE_JOBS; do
    IFS=: read -r envs group name <<< \"\$job\"
    only=\$(echo \"\$group\" | sed -E 's/([^,]+)/thompson[\\1]/g')
    timeout $TABLE_LIMIT python3 experiments/bandit_table.py --envs \$envs --steps $FULL_DECISIONS --trials 10 \
      --protocol fsvgd-paper --device $DEVICE --parallel batched --workers 6 --log-every 2500 \
      --only \"\$only\" --posteriors \$group \
      --out $TB/\$name > $OUT/table_\$name.log 2>&1 &
  done
  [ \"${GPU_SESSION_TABLE_CPU:-1}\" = 1 ] && timeout $TABLE_LIMIT python3 experiments/bandit_table.py --envs wheel,mushroom \
    --steps $FULL_DECISIONS --trials 10 --protocol fsvgd-paper --device cpu --parallel processes --workers 8 \
    --only linear --posteriors mfvi --out $TB/cpu > $OUT/table_cpu.log 2>&1 &
  wait; tail -n 12 $OUT/table_gpu_*.log $OUT/table_cpu.log 2>/dev/null
  # the device tool brings back only a few files: the table's folders travel as one archive
  tar czf $OUT/table50k.tgz -C $OUT table50k && rm -rf $TB"
# the rest of the paper-preset table (issue 9): the other four posteriors, batched the same way
step table50k_rest "$((TABLE_LIMIT + 20))" bash -c "
  timeout $TABLE_LIMIT python3 experiments/bandit_table.py --envs wheel,mushroom --steps $FULL_DECISIONS --trials 10 \
    --protocol fsvgd-paper --device $DEVICE --parallel batched --workers 8 --log-every 2500 \
    --only 'thompson[bb-alpha],thompson[dropout-alpha],thompson[ensemble],thompson[svgd]' \
    --posteriors bb-alpha,dropout-alpha,ensemble,svgd --out $TB/rest > $OUT/table_gpu_rest.log 2>&1;
  tail -n 12 $OUT/table_gpu_rest.log; tar czf $OUT/table50k_rest.tgz -C $OUT table50k && rm -rf $TB"
