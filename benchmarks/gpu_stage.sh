# Sourced by benchmarks/gpu_check.sh and benchmarks/gpu_smollm2.sh (needs PY and RUNS set, $RUNS/logs made).
#
# stage NAME COMMAND...: run COMMAND under TIMEOUT_NAME seconds (else STAGE_TIMEOUT; 0 or unset: no limit), tee its
# output to $RUNS/logs/NAME.log and append {stage, wall_s, rc, command} to $RUNS/times.jsonl. Returns its rc (124:
# stopped at the limit).
stage() {
    local name=$1
    shift
    echo "=== $name: $*"
    local t0 t1 rc limit_var="TIMEOUT_$name"
    t0=$(date +%s.%N)
    timeout "${!limit_var:-${STAGE_TIMEOUT:-0}}" "$@" 2>&1 | tee "$RUNS/logs/$name.log"
    rc=${PIPESTATUS[0]}
    t1=$(date +%s.%N)
    "$PY" -c 'import json, sys; n, t0, t1, rc, cmd = sys.argv[1:]
print(json.dumps({"stage": n, "wall_s": round(float(t1) - float(t0), 1), "rc": int(rc), "command": cmd}))' \
        "$name" "$t0" "$t1" "$rc" "$*" >>"$RUNS/times.jsonl"
    echo "=== $name: rc=$rc, $(awk "BEGIN {printf \"%.1f\", $t1 - $t0}") s"
    return "$rc"
}
