#!/usr/bin/env bash
# Footprint: how fast okd-appliance is ready and how much memory it holds while idle.
#
#   sudo bash bench/footprint.sh
#
# The large example (config/large.yml: a /20, sixteen reverse zones, legacy etcd records) is
# served for real in a network namespace of its own: a veth `bond0` carries the appliance
# address, so DNS, DHCP, TFTP, the load balancer and HTTP all bind as on a services host. Each
# of RUNS starts measures the time from exec to READY=1 on a NOTIFY_SOCKET (what systemd waits
# for with Type=notify), then, after IDLE seconds with no traffic, VmRSS and VmHWM from /proc.
# Figures are medians over the runs.
#
# Environment knobs (defaults in brackets):
#   RUNS [7]          starts
#   IDLE [3]          seconds idle before memory is read
#   SKIP_BUILD=1      use the existing target/release/okd-appliance
#   NO_DOC=1          don't rewrite the Footprint section of docs/performance.md
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

RUNS=${RUNS:-7}
IDLE=${IDLE:-3}
NS=fp$$

[[ $EUID -eq 0 ]] || die "run as root: sudo bash bench/footprint.sh"
command -v python3 >/dev/null 2>&1 || die "python3 missing"
build_appliance

trap bench_cleanup EXIT
trap 'exit 130' INT TERM
BENCH_TMP=$(mktemp -d /tmp/okd-footprint.XXXXXX)
W=$BENCH_TMP

bench_netns_add "$NS"
ip -n "$NS" link add bond0 type veth peer name fpeer
ip -n "$NS" addr add 10.20.16.2/20 dev bond0
ip -n "$NS" link set fpeer up
ip -n "$NS" link set bond0 up

# The example as shipped, with its directories moved into the work directory.
mkdir -p "$W/install" "$W/artifacts" "$W/state"
for role in bootstrap master worker; do
  printf '{"ignition":{"version":"3.2.0"}}\n' >"$W/install/$role.ign"
done
sed -e "s#ignition_dir: /srv/okd/install#ignition_dir: $W/install#" \
  -e "s#artifacts_dir: /srv/okd/artifacts#artifacts_dir: $W/artifacts#" \
  "$ROOT/config/large.yml" >"$W/large.yml"
printf 'state_dir: %s/state\n' "$W" >>"$W/large.yml"
"$BIN" check "$W/large.yml" >"$W/check.log" 2>&1 || die "check failed: $(tail -n 5 "$W/check.log")"

# One start: exec to READY=1 in ms, then VmRSS and VmHWM in KiB after IDLE seconds.
# Prints "ready_ms rss_kib hwm_kib".
measure() {
  ip netns exec "$NS" env RUST_LOG=warn NO_COLOR=1 python3 - "$BIN" "$W/large.yml" "$IDLE" "$W/notify.sock" <<'PY'
import os, socket, subprocess, sys, time
binary, config, idle, path = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
if os.path.exists(path):
    os.unlink(path)
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.bind(path)
sock.settimeout(10)
env = dict(os.environ, NOTIFY_SOCKET=path)
start = time.monotonic()
child = subprocess.Popen([binary, "serve", config], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
ready = None
try:
    while ready is None:
        message = sock.recv(4096).decode(errors="replace")
        if "READY=1" in message.split("\n"):
            ready = (time.monotonic() - start) * 1000
    time.sleep(idle)
    status = open(f"/proc/{child.pid}/status").read()
    field = lambda name: next(l.split()[1] for l in status.splitlines() if l.startswith(name + ":"))
    print(f"{ready:.1f} {field('VmRSS')} {field('VmHWM')}")
finally:
    child.terminate()
    try:
        child.wait(timeout=10)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
PY
}

log "large example, $RUNS starts, memory after ${IDLE}s idle"
: >"$W/runs.txt"
for ((i = 1; i <= RUNS; i++)); do
  line=$(measure) || die "start $i failed"
  log "  start $i: ready in ${line%% *} ms; RSS, peak RSS (KiB): ${line#* }"
  echo "$line" >>"$W/runs.txt"
done

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
READY_MS=$(awk '{print $1}' "$W/runs.txt" | median)
RSS_MIB=$(awk '{print $2 / 1024}' "$W/runs.txt" | median)
HWM_MIB=$(awk '{print $3 / 1024}' "$W/runs.txt" | median)
verdict() { if awk -v a="$1" -v b="$2" 'BEGIN {exit !(a + 0 <= b + 0)}'; then echo "**met**"; else echo "**not met**"; fi; }

report=$W/report.md
{
  REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
  git -C "$ROOT" diff --quiet HEAD -- appliance 2>/dev/null || REV="$REV with uncommitted changes"
  cat <<EOF
## Footprint

Command: \`sudo bash bench/footprint.sh\`, run $(date -u '+%Y-%m-%d %H:%M UTC') on okd-appliance $REV.
Machine: $(nproc) cores ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), no KVM.
config/large.yml served in a namespace (every service bound: DNS, DHCP on a veth \`bond0\`,
TFTP, the load balancer, HTTP); medians of $RUNS starts. *Ready* is exec to READY=1 on the
notify socket; memory is read after ${IDLE} s idle (VmRSS, and VmHWM, the peak so far).

| figure | median | target (performance issue) |
| --- | ---: | --- |
| exec to READY=1 | $(printf '%.1f' "$READY_MS") ms | < 100 ms: $(verdict "$READY_MS" 99.999) |
| RSS idle | $(printf '%.1f' "$RSS_MIB") MiB | <= 20 MB (19.07 MiB): $(verdict "$RSS_MIB" 19.07) |
| peak RSS up to then | $(printf '%.1f' "$HWM_MIB") MiB | |

The RSS under the full mixed load (DNS + DHCP + LB + HTTP at once) against the peers' sum is
measured by bench/mixed.sh: \`## Memory under the mixed load\`.
EOF
} >"$report"
cat "$report"
if [[ ${NO_DOC:-0} != 1 ]]; then
  replace_doc_section "$ROOT/docs/performance.md" Footprint "$report"
  log "wrote the Footprint section of docs/performance.md"
fi
