# Sourced by the bench scripts: optional CPU pinning, so that the load generator and the
# brokers do not fight over the same cores (docs/bench.md, "Pinned runs").
# env: PIN=1 turns it on; BROKER_CPUS (default 1) is where every broker of both systems
#      runs, LOADGEN_CPUS (default 0) where `runnel bench` runs. Both systems are pinned
#      after they started, so each sizes its thread pools for the whole machine as it
#      would unpinned, and then shares the same CPUs.
#      While one system is measured, the other waits on LOADGEN_CPUS (`bench compare
#      --park-cpus`: an idle Kafka broker uses 4-9% of a core, which would otherwise come out
#      of the other system's run); PARK=0 leaves both on BROKER_CPUS throughout.
PIN="${PIN:-0}"
BROKER_CPUS="${BROKER_CPUS:-1}"
LOADGEN_CPUS="${LOADGEN_CPUS:-0}"
PARK_OPTS=()
if [[ "$PIN" == 1 && "${PARK:-1}" == 1 ]]; then
  PARK_OPTS=(--park-cpus "$LOADGEN_CPUS")
fi

pin_brokers() {  # pids...: every thread of each, now and later, on BROKER_CPUS
  [[ "$PIN" == 1 ]] || return 0
  local pid
  for pid in "$@"; do
    taskset -a -p -c "$BROKER_CPUS" "$pid" >/dev/null
  done
}

loadgen() {  # command...: run on LOADGEN_CPUS when pinning
  if [[ "$PIN" == 1 ]]; then
    taskset -c "$LOADGEN_CPUS" "$@"
  else
    "$@"
  fi
}

pin_note() {  # one line for a summary: how this run was pinned
  if [[ "$PIN" == 1 ]]; then
    echo "pinned: brokers on CPUs $BROKER_CPUS, load generator on CPUs $LOADGEN_CPUS$([[ ${#PARK_OPTS[@]} -gt 0 ]] && echo ", the system not measured parked on CPUs $LOADGEN_CPUS")"
  else
    echo "not pinned: brokers and load generator share every CPU"
  fi
}
