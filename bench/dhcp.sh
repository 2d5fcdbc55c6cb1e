#!/usr/bin/env bash
# DHCP benchmark: okd-appliance against dnsmasq (default) or Kea, in one run, on this machine.
#
#   sudo bash bench/dhcp.sh              # against dnsmasq: the `## DHCP` section of the doc
#   sudo PEER=kea bash bench/dhcp.sh     # against kea-dhcp4 (memfile, persisting): `## DHCP vs Kea`
#   sudo PEER=kea LIKE_KEA=1 bash bench/dhcp.sh
#                                        # the same, okd-appliance as durable as Kea's memfile:
#                                        # `## DHCP vs Kea, same durability`
#
# Both servers serve the same cluster config (a /20, a dynamic pool of 3834 addresses, 12 h
# leases, 5 reservations): okd-appliance from the YAML, dnsmasq from `okd-appliance render
# --format dnsmasq` of that YAML (DHCP part; DNS off) plus a lease file, `--dhcp-authoritative`,
# `--no-ping` and a lease limit above the pool. perfdhcp (kea-admin) runs 4-way exchanges
# (DISCOVER-OFFER-REQUEST-ACK) from CLIENTS simulated clients at a fixed rate; for each server
# the rate climbs a ladder (RATES, STEP seconds each) until more than MAX_DROP percent of the
# exchanges go unanswered. The figure is the highest rate that still completes with at most
# MAX_DROP percent lost, plus average/max latency of DISCOVER-OFFER and REQUEST-ACK as perfdhcp
# prints them, and the server's CPU time per completed exchange (utime+stime from /proc).
#
# Durability: okd-appliance appends each group of lease changes to its journal and fdatasyncs
# it before sending the group's ACKs; dnsmasq rewrites its whole lease file and fsyncs it before
# each ACK. The state directory and dnsmasq's lease file live in the work directory (mktemp
# under /tmp; the script logs the file system type and warns on tmpfs, where syncs are free).
# Kea's memfile never syncs its lease file (an ACKed lease lives in the page cache until the
# kernel writes it back). LIKE_KEA=1 gives okd-appliance that same durability without changing
# it: its state directory goes to tmpfs (/dev/shm), where its fdatasync returns at once, so the
# figure is okd-appliance's with nothing waiting for the disk, as Kea runs.
#
# Topology (names carry this script's PID, so parallel runs never collide):
#   dcli<PID> (perfdhcp, 10.97.0.200, CPU 1) --veth dc<PID> / ds<PID)-- dsrv<PID> (server,
#   10.97.0.1, CPU 0). perfdhcp acts as a relay (giaddr 10.97.0.200) and sends to 10.97.0.1.
# One server runs at a time (all bind port 67), each ladder on a fresh server with an empty
# lease table; rounds rotate the order so drift in the machine hits all alike.
#
# With PEER=kea, Kea runs in every configuration of its matrix (KEA_MATRIX): multi-threading off
# and on (`thread-pool-size` 1, so one packet thread besides the receiver, pinned to CPU 0 like
# the others); okd-appliance is compared with Kea's best configuration per figure and the whole
# matrix is printed. The script fails when Kea's best and worst configurations differ by more
# than 2x in a figure and no option that tells them apart has a note in WHY. The rate figure is
# a lower bound when perfdhcp's core is the limit (the first table's last column); CPU per
# exchange at the common rate is the figure that holds then.
#
# Environment knobs (defaults in brackets):
#   ROUNDS [2]          rounds (each: one ladder per server, order rotating)
#   STEP [4]            seconds of each perfdhcp run
#   RATES ["100 300 1000 2000 4000 6000 8000 10000 12000 14000 16000 18000 20000 24000 32000"]
#   CLIENTS [3000]      perfdhcp -R: distinct simulated clients (MACs), below the pool size
#   MAX_DROP [1]        percent of exchanges that may be lost for a step to pass
#   BUDGET [420]        seconds: no new step starts after this (the run stays under ~8 min)
#   SKIP_BUILD=1        use the existing target/release/okd-appliance
#   NO_DOC=1            don't rewrite the DHCP section of docs/performance.md
#   DOC [docs/performance.md]  the file whose `## DHCP` section is (re)written
#   KEEP=1              keep the work directory (configs, logs, perfdhcp outputs)
#   LIKE_KEA=1          okd-appliance's state directory on tmpfs (durable like Kea's memfile);
#                       needs PEER=kea
#   KEA_MATRIX          Kea's configurations, one a line ["multi-threading=off" and
#                       "multi-threading=on thread-pool-size=1"]
#   BIN                 the okd-appliance binary to run (default: built unless SKIP_BUILD=1)
#   PROFILE=1           after the ladders, one more okd-appliance run under `perf record`
#                       (cpu-clock samples) at PROFILE_RATE [4000] exchanges/s for STEP seconds;
#                       the shares by binary, system call and function go into the section
set -Eeuo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

ROUNDS=${ROUNDS:-2}
STEP=${STEP:-4}
RATES=${RATES:-"100 300 1000 2000 4000 6000 8000 10000 12000 14000 16000 18000 20000 24000 32000"}
CLIENTS=${CLIENTS:-3000}
MAX_DROP=${MAX_DROP:-1}
BUDGET=${BUDGET:-420}
BENCH_KEEP_TMP=${KEEP:-0}

SRV_NS=dsrv$$
CLI_NS=dcli$$
SRV_IF=ds$$
CLI_IF=dc$$
SRV_IP=10.97.0.1
CLI_IP=10.97.0.200
PREFIX=20
POOL_START=10.97.1.1
POOL_END=10.97.15.250
POOL_SIZE=3834
LEASE_TIME=12h
SRV_CPU=0
LOAD_CPU=1
PEER=${PEER:-dnsmasq}
[[ $PEER == dnsmasq || $PEER == kea ]] || die "PEER is dnsmasq or kea"
LIKE_KEA=${LIKE_KEA:-0}
[[ $LIKE_KEA == 0 || $PEER == kea ]] || die "LIKE_KEA=1 compares with Kea: set PEER=kea"
declare -A KEA_CONF
if [[ $PEER == kea ]]; then
  KEA_MATRIX=${KEA_MATRIX:-"multi-threading=off
multi-threading=on thread-pool-size=1"}
  SERVERS=(okd-appliance)
  matrix_configs kea "$KEA_MATRIX" SERVERS KEA_CONF
else
  SERVERS=(okd-appliance "$PEER")
fi
# Why each option can move Kea's figures (what it does; the matrix shows by how much).
declare -A WHY=(
  [multi-threading]="on: a receiver thread queues packets for a pool of packet threads, and leases are locked per address; off: one thread receives, decides and answers each packet. On one core the threads share it, so the hand-off is a cost rather than parallelism."
  [thread-pool-size]="packet threads with multi-threading on; 1, as okd-appliance runs one worker."
)

[[ $EUID -eq 0 ]] || die "run as root: sudo bash bench/dhcp.sh"
(($(nproc) >= 2)) || die "needs at least 2 CPUs (server on CPU $SRV_CPU, load on CPU $LOAD_CPU)"
((CLIENTS < POOL_SIZE)) || die "CLIENTS ($CLIENTS) must stay below the pool size ($POOL_SIZE)"

# --- tools -----------------------------------------------------------------------------------
export PATH="$PATH:/usr/sbin:/sbin"
for tool in perfdhcp taskset ss; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool missing (perfdhcp: apt-get install kea-admin)"
done
case $PEER in
  dnsmasq) command -v dnsmasq >/dev/null 2>&1 || die "dnsmasq missing" ;;
  kea) command -v kea-dhcp4 >/dev/null 2>&1 || die "kea-dhcp4 missing (apt-get install kea-dhcp4-server)" ;;
esac

PROFILE=${PROFILE:-0}
PROFILE_RATE=${PROFILE_RATE:-4000}
if ((PROFILE)); then
  command -v perf >/dev/null 2>&1 || die "PROFILE=1 needs perf (apt-get install linux-perf)"
fi

build_appliance
BUSY_AT_START=$(busy_pct)
NOISE_MAX=$(noise_count 'dnsperf|perfdhcp')
if ((NOISE_MAX > 0 || BUSY_AT_START > 10)); then
  log "warning: $NOISE_MAX build/test/load processes running, machine ${BUSY_AT_START}% busy; numbers will be noisy"
fi

# --- cleanup ---------------------------------------------------------------------------------
# bench_cleanup (lib.sh) stops what we started by PID and deletes the namespaces and their
# /etc/netns directories.
# With LIKE_KEA=1, okd-appliance's state directory (a tmpfs directory, removed at exit).
SHM_STATE=
trap 'bench_cleanup; [[ -z $SHM_STATE ]] || rm -rf "$SHM_STATE"' EXIT
trap 'exit 130' INT TERM
BENCH_TMP=$(mktemp -d /tmp/okd-dhcpbench.XXXXXX)
if [[ $LIKE_KEA == 1 ]]; then
  SHM_STATE=$(mktemp -d /dev/shm/okd-dhcpbench-state.XXXXXX)
  [[ $(df --output=fstype "$SHM_STATE" | tail -n 1) == tmpfs ]] || die "/dev/shm is not tmpfs"
  log "LIKE_KEA=1: okd-appliance's state directory on tmpfs ($SHM_STATE): its syncs cost nothing, as Kea's memfile does not sync"
fi
W=$BENCH_TMP
START=$SECONDS
# df names ext4 as such (stat -f says ext2/ext3 for the whole family).
FS_TYPE=$(df --output=fstype "$W" 2>/dev/null | tail -n 1)
[[ -n $FS_TYPE ]] || FS_TYPE=$(stat -f -c %T "$W")
log "work directory $W ($FS_TYPE)"
[[ $FS_TYPE != tmpfs ]] || log "warning: $W is on tmpfs: fdatasync costs nothing there"

# --- topology --------------------------------------------------------------------------------
log "namespaces $SRV_NS, $CLI_NS"
bench_netns_with_resolv "$SRV_NS"
bench_netns_with_resolv "$CLI_NS"
bench_veth "$SRV_NS" "$SRV_IF" "$SRV_IP/$PREFIX" "$CLI_NS" "$CLI_IF" "$CLI_IP/$PREFIX"

# --- configs ---------------------------------------------------------------------------------
mkdir -p "$W/cluster/install_dir" "$W/cluster/artifacts"
for role in bootstrap master worker; do
  printf '{"ignition":{"version":"3.2.0"}}\n' >"$W/cluster/install_dir/$role.ign"
done
CFG=$W/cluster/cluster.yml
cat >"$CFG" <<EOF
# A /20 with a pool of $POOL_SIZE addresses and the lab's 5 reservations; DHCP only.
version: 1
cluster:
  name: okd
  base_domain: bench.example.com
network:
  interface: $SRV_IF
  subnet: 10.97.0.0/$PREFIX
  gateway: $SRV_IP
  appliance_ip: $SRV_IP
  lease_time: $LEASE_TIME
  dhcp_pool: { start: $POOL_START, end: $POOL_END }
nodes:
  - { name: bootstrap, role: bootstrap, mac: "52:54:00:00:00:07", ip: 10.97.0.7 }
  - { name: master-0, role: master, mac: "52:54:00:00:00:02", ip: 10.97.0.2 }
  - { name: master-1, role: master, mac: "52:54:00:00:00:03", ip: 10.97.0.3 }
  - { name: master-2, role: master, mac: "52:54:00:00:00:04", ip: 10.97.0.4 }
  - { name: worker-0, role: worker, mac: "52:54:00:00:00:05", ip: 10.97.0.5 }
install:
  ignition_dir: ./install_dir
  artifacts_dir: ./artifacts
  install_dev: /dev/vda
listen: {dns: [], tftp: [], http: [], api: [], machine_config: [], ingress_https: [], ingress_http: []}
state_dir: ./state
EOF
"$BIN" check "$CFG" >"$W/check.out" 2>&1 || {
  cat "$W/check.out" >&2
  die "okd-appliance check rejected the benchmark config"
}
# dnsmasq: the rendered equivalent (its DNS part is only `port=0` and local data), plus what
# a benchmark needs: its files in the work directory, no ping before an offer (okd-appliance
# does not ping either; dnsmasq's default waits for the echo), a lease limit above the pool
# (default 1000), and no per-packet log lines (okd-appliance runs with RUST_LOG=warn).
"$BIN" render "$CFG" --format dnsmasq >"$W/dnsmasq-rendered.conf"
grep -q "^dhcp-range=$POOL_START,$POOL_END," "$W/dnsmasq-rendered.conf" ||
  die "the rendered dnsmasq config has no dhcp-range for the pool"
grep -q '^dhcp-authoritative' "$W/dnsmasq-rendered.conf" || echo dhcp-authoritative >>"$W/dnsmasq-rendered.conf"
grep -q '^port=0' "$W/dnsmasq-rendered.conf" || echo port=0 >>"$W/dnsmasq-rendered.conf"

# --- servers ---------------------------------------------------------------------------------
PID=""
spawn() {
  local dir=$1
  shift
  ip netns exec "$SRV_NS" taskset -c "$SRV_CPU" "$@" >"$dir/out.log" 2>&1 &
  PID=$!
  bench_track "$PID"
}

start_okd() {
  rm -rf "$W/cluster/state"
  if [[ -n $SHM_STATE ]]; then
    rm -rf "${SHM_STATE:?}"/*
    ln -s "$SHM_STATE" "$W/cluster/state"
  fi
  spawn "$1" env TOKIO_WORKER_THREADS=1 RUST_LOG=warn NO_COLOR=1 "$BIN" serve "$CFG"
}

# Kea as its users run it for a lab: memfile with persistence (the CSV lease file; Kea does not
# fsync it), one subnet with the pool and the same 5 reservations, the same lease time, UDP
# sockets (perfdhcp relays), no per-packet logging.
start_kea() {
  local d=$1 conf=${KEA_CONF[$2]:-} mt threads
  rm -f "$d/leases.csv"
  mt=$(matrix_opt multi-threading "$conf")
  threads=$(matrix_opt thread-pool-size "$conf")
  kea_config "$d/leases.csv" "$SRV_IF" "10.97.0.0/$PREFIX" "$POOL_START" "$POOL_END" "$CLI_IP" \
    "$SRV_IP" 52:54:00:00:00:07=10.97.0.7 52:54:00:00:00:02=10.97.0.2 52:54:00:00:00:03=10.97.0.3 \
    52:54:00:00:00:04=10.97.0.4 52:54:00:00:00:05=10.97.0.5 |
    if [[ $mt == on ]]; then
      sed -e 's/^  "valid-lifetime"/  "multi-threading": { "enable-multi-threading": true, "thread-pool-size": '"${threads:-1}"', "packet-queue-size": 64 },\n  "valid-lifetime"/'
    else
      sed -e 's/^  "valid-lifetime"/  "multi-threading": { "enable-multi-threading": false },\n  "valid-lifetime"/'
    fi >"$d/kea.json"
  spawn "$d" env KEA_LOCKFILE_DIR="$d" KEA_PIDFILE_DIR="$d" kea-dhcp4 -c "$d/kea.json"
}

start_dnsmasq() {
  local d=$1
  rm -f "$d/leases"
  spawn "$d" dnsmasq --keep-in-foreground -C "$W/dnsmasq-rendered.conf" --user=root \
    --log-facility=- --pid-file="$d/dnsmasq.pid" --dhcp-leasefile="$d/leases" \
    --dhcp-lease-max=$((POOL_SIZE * 4)) --no-ping --quiet-dhcp
}

port67_bound() {
  ip netns exec "$SRV_NS" ss -Hlun 'sport = :67' | grep -q .
}

# A second of 20 exchanges/s from one client: true when at least one ACK came back. (Without
# -r perfdhcp floods; with -n 1 it stops before the ACK can arrive.)
exchange_ok() {
  timeout 5 ip netns exec "$CLI_NS" perfdhcp -4 -l "$CLI_IF" -R 1 -r 20 -p 1 -W 500000 "$SRV_IP" 2>&1 |
    awk '/Statistics for: REQUEST-ACK/ { ra = 1 } ra && /^received packets:/ { n = $3 } END { exit !(n > 0) }'
}

# start NAME DIR: starts a fresh server NAME and waits (15 s at most) until it completes one
# exchange. Sets PID.
start() {
  local name=$1 d=$2
  mkdir -p "$d"
  case $name in
    okd-appliance) start_okd "$d" ;;
    dnsmasq) start_dnsmasq "$d" ;;
    kea*) start_kea "$d" "$name" ;;
  esac
  if ! wait_until 15 port67_bound || ! wait_until 15 exchange_ok; then
    log "error: $name did not answer DHCP within 15 s; the end of its log:"
    tail -n 20 "$d/out.log" >&2 || true
    return 1
  fi
  pid_alive "$PID" || {
    tail -n 20 "$d/out.log" >&2 || true
    die "$name exited"
  }
}

# --- one perfdhcp step -----------------------------------------------------------------------
# step ROUND NAME RATE DIR: one STEP-second perfdhcp run against the server PID; appends a line
# to $W/steps.tsv:
#   round server rate do_sent do_recv ra_sent ra_recv completed/s lost% do_avg do_max ra_avg
#   ra_max server_ticks load_cpu_s ok server_user_ticks server_rcvbuf_drops client_rcvbuf_drops
# and returns 1 when the step failed (more than MAX_DROP % lost, or perfdhcp could not send
# 95% of the offered rate, which would make the server look better than it is).
TICK=$(getconf CLK_TCK)
# UDP datagrams a namespace's sockets dropped for a full receive buffer (/proc/net/snmp is per
# namespace).
rcvbuf_errors() {
  ip netns exec "$1" cat /proc/net/snmp |
    awk '$1 == "Udp:" { if (!h) { for (i = 2; i <= NF; i++) col[$i] = i; h = 1 } else print $col["RcvbufErrors"] }'
}
step() {
  local round=$1 name=$2 rate=$3 d=$4 out u0 s0 u1 s1 line sb0 sb1 cb0 cb1
  out=$d/perfdhcp-r$rate.txt
  sb0=$(rcvbuf_errors "$SRV_NS")
  cb0=$(rcvbuf_errors "$CLI_NS")
  read -r u0 s0 < <(proc_tree_times "$PID")
  # -W: after the last DISCOVER, wait 1 s for the replies still in flight.
  timeout $((STEP + 15)) ip netns exec "$CLI_NS" taskset -c "$LOAD_CPU" \
    /usr/bin/time -f 'load_cpu %U %S' -o "$d/time-r$rate.txt" \
    perfdhcp -4 -l "$CLI_IF" -r "$rate" -R "$CLIENTS" -p "$STEP" -W 1000000 -s 7 \
    "$SRV_IP" >"$out" 2>&1 || true
  read -r u1 s1 < <(proc_tree_times "$PID")
  sb1=$(rcvbuf_errors "$SRV_NS")
  cb1=$(rcvbuf_errors "$CLI_NS")
  pid_alive "$PID" || die "$name died during the $rate/s step (see $d/out.log)"
  line=$(awk -v round="$round" -v name="$name" -v rate="$rate" -v step="$STEP" \
    -v ticks=$((u1 + s1 - u0 - s0)) -v uticks=$((u1 - u0)) -v sbuf=$((sb1 - sb0)) -v cbuf=$((cb1 - cb0)) -v maxdrop="$MAX_DROP" -v timefile="$d/time-r$rate.txt" '
    /Statistics for: DISCOVER-OFFER/ { sec = "do" }
    /Statistics for: REQUEST-ACK/ { sec = "ra" }
    /Statistics for:/ && !/DISCOVER-OFFER|REQUEST-ACK/ { sec = "" }
    sec != "" && /^sent packets:/ { sent[sec] = $3 }
    sec != "" && /^received packets:/ { recv[sec] = $3 }
    # With nothing received perfdhcp prints "avg delay: min delay: n/a" and the like.
    sec != "" && /^avg delay:/ { avg[sec] = ($3 ~ /^[0-9.]+$/) ? $3 : "-" }
    sec != "" && /^max delay:/ { max[sec] = ($3 ~ /^[0-9.]+$/) ? $3 : "-" }
    END {
      load = 0
      while ((getline l < timefile) > 0) {
        split(l, f, " ")
        if (f[1] == "load_cpu") load = f[2] + f[3]
      }
      do_sent = sent["do"] + 0
      done_ = recv["ra"] + 0
      lost = do_sent ? (1 - done_ / do_sent) * 100 : 100
      ok = (do_sent > 0 && lost <= maxdrop && do_sent >= 0.95 * rate * step) ? 1 : 0
      printf "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%.1f\t%.3f\t%s\t%s\t%s\t%s\t%d\t%.2f\t%d\t%d\t%d\t%d\n",
        round, name, rate, do_sent, recv["do"], sent["ra"], done_, done_ / step, lost,
        avg["do"] == "" ? "-" : avg["do"], max["do"] == "" ? "-" : max["do"],
        avg["ra"] == "" ? "-" : avg["ra"], max["ra"] == "" ? "-" : max["ra"],
        ticks, load, ok, uticks, sbuf, cbuf
    }' "$out")
  printf '%s\n' "$line" >>"$W/steps.tsv"
  local f
  IFS=$'\t' read -r -a f <<<"$line"
  log "  $name ${rate}/s: ${f[7]} exchanges/s done, ${f[8]}% lost, DO avg ${f[9]} ms, RA avg ${f[11]} ms, UDP rcvbuf drops server ${f[17]} client ${f[18]}, server CPU $(awk -v t="${f[13]}" -v hz="$TICK" -v s="$STEP" 'BEGIN {printf "%.0f", t / hz / s * 100}')%"
  ((f[15] == 1))
}

# ladder ROUND NAME: a fresh server, then the rate ladder until a step fails (a failed step
# is tried once more before the ladder stops: one bad second should not end it).
ladder() {
  local round=$1 name=$2 d=$W/r$1-$2 rate retried
  log "round $round: $name"
  start "$name" "$d" || die "$name did not start"
  for rate in $RATES; do
    if ((SECONDS - START > BUDGET)); then
      log "  time budget (${BUDGET} s) spent: the ladder stops at $rate/s"
      echo "$round $name budget" >>"$W/notes"
      break
    fi
    retried=0
    while ! step "$round" "$name" "$rate" "$d"; do
      if ((retried)); then
        break 2
      fi
      retried=1
      # Forget the failed attempt; a second failure ends the ladder.
      sed -i '$d' "$W/steps.tsv"
      log "  retrying $rate/s once"
    done
  done
  stop_pid "$PID" 5 || log "warning: $name (PID $PID) did not stop cleanly"
}

: >"$W/steps.tsv"
: >"$W/notes"
for ((round = 1; round <= ROUNDS; round++)); do
  order=()
  for ((k = 0; k < ${#SERVERS[@]}; k++)); do order+=("${SERVERS[$(((k + round - 1) % ${#SERVERS[@]}))]}"); done
  for name in "${order[@]}"; do
    ladder "$round" "$name"
  done
done
ELAPSED=$((SECONDS - START))

# --- profile -----------------------------------------------------------------------------------
# Where okd-appliance's CPU goes at a rate it sustains: a fresh server, one perfdhcp run of
# STEP seconds at PROFILE_RATE under `perf record`.
PROFILE_MD=$W/profile.md
if ((PROFILE)); then
  d=$W/profile
  log "profile: okd-appliance at $PROFILE_RATE exchanges/s"
  start okd-appliance "$d" || die "okd-appliance did not start"
  profile_start "$PID" "$d/perf.data" "$STEP"
  timeout $((STEP + 15)) ip netns exec "$CLI_NS" taskset -c "$LOAD_CPU" \
    perfdhcp -4 -l "$CLI_IF" -r "$PROFILE_RATE" -R "$CLIENTS" -p "$STEP" -W 1000000 -s 7 \
    "$SRV_IP" >"$d/perfdhcp.txt" 2>&1 || true
  profile_wait
  stop_pid "$PID" 5 || log "warning: okd-appliance (PID $PID) did not stop cleanly"
  done_=$(awk '/Statistics for: REQUEST-ACK/ { ra = 1 } ra && /^received packets:/ { print $3; exit }' "$d/perfdhcp.txt")
  {
    echo "### Where okd-appliance's CPU goes (DHCP)"
    echo
    echo "\`PROFILE=1\`: \`perf record -e cpu-clock -F 1999 -g\` of okd-appliance for a ${STEP} s perfdhcp run at $PROFILE_RATE exchanges/s (${done_:-no} ACKs), a fresh server with an empty lease table, its journal synced before each group's ACKs as in the ladder$([[ $LIKE_KEA == 1 ]] && echo ' (on tmpfs)'). $PROFILE_HOW"
    echo
    profile_md "$d/perf.data"
  } >"$PROFILE_MD"
fi

# --- results ---------------------------------------------------------------------------------
# Per round and server: the highest passing step and the next (failing) one. "Common rate":
# the highest rate every server (with PEER=kea: every Kea configuration) passed in the round,
# to compare latency and CPU at one load.
# Ratios use the medians over the rounds.
RESULT=$W/result.md
awk -F'\t' -v hz="$TICK" -v step="$STEP" -v rounds="$ROUNDS" -v maxdrop="$MAX_DROP" \
  -v list="${SERVERS[*]}" -v perround="$W/perround.tsv" '
  function med(arr, n,   i, j, t, x) {
    for (i = 1; i <= n; i++) x[i] = arr[i]
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (x[j] < x[i]) { t = x[i]; x[i] = x[j]; x[j] = t }
    return n % 2 ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2
  }
  # CPU µs per completed exchange: ticks over (completed/s * seconds).
  function us(ticks, per_s) { return per_s > 0 ? ticks / hz * 1e6 / (per_s * step) : 0 }
  function ms(avg, max) { return avg " / " max }
  {
    key = $1 SUBSEP $2
    if ($16 == 1) {
      if (!(key in best) || $3 > bestrate[key]) { best[key] = $0; bestrate[key] = $3 }
      pass[$1, $2, $3] = $0
    } else if (!(key in fail)) fail[key] = $0
  }
  END {
    ns = split(list, srv, " "); a = srv[1]
    printf "Highest offered rate with at most %s%% of the exchanges lost, per round:\n\n", maxdrop
    print "| server | round | max rate /s | completed exchanges/s | lost | DISCOVER-OFFER avg / max ms | REQUEST-ACK avg / max ms | server CPU | CPU µs/exchange | of which user | next step: lost, UDP rcvbuf drops server / client, perfdhcp CPU |"
    print "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    for (i = 1; i <= ns; i++) {
      s = srv[i]
      for (r = 1; r <= rounds; r++) {
        key = r SUBSEP s
        nxt = "none (top of ladder or time budget)"
        if (key in fail) { split(fail[key], g, "\t"); nxt = sprintf("%d/s: %.1f%%, %d / %d, %.0f%%", g[3], g[9], g[18], g[19], g[15] / (step + 1) * 100) }
        if (!(key in best)) {
          printf "| %s | %d | none | | | | | | | | %s |\n", s, r, nxt
          continue
        }
        split(best[key], f, "\t")
        nmax[s]++; maxrate[s, nmax[s]] = f[8]
        printf "%s\t%d\tmax\t%s\n", s, r, f[8] > perround
        printf "| %s | %d | %d | %.0f | %.2f%% | %s | %s | %.0f%% | %.1f | %.1f | %s |\n", s, r, f[3], f[8], f[9],
          ms(f[10], f[11]), ms(f[12], f[13]), f[14] / hz / step * 100, us(f[14], f[8]), us(f[17], f[8]), nxt
      }
    }
    printf "\nAt the common rate (the highest rate every server passed in the round):\n\n"
    print "| server | round | rate /s | DISCOVER-OFFER avg / max ms | REQUEST-ACK avg / max ms | server CPU | CPU µs/exchange | of which user |"
    print "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    for (i = 1; i <= ns; i++) {
      s = srv[i]
      for (r = 1; r <= rounds; r++) {
        c = ""
        for (j = 1; j <= ns; j++) {
          if (!((r SUBSEP srv[j]) in best)) { c = -1; break }
          if (c == "" || bestrate[r, srv[j]] < c) c = bestrate[r, srv[j]]
        }
        if (c < 0) continue
        split(pass[r, s, c], h, "\t")
        nc[s]++; ccpu[s, nc[s]] = us(h[14], h[8]); cdo[s, nc[s]] = h[10]; cra[s, nc[s]] = h[12]
        printf "%s\t%d\tcpu\t%.1f\n", s, r, us(h[14], h[8]) > perround
        printf "| %s | %d | %d | %s | %s | %.0f%% | %.1f | %.1f |\n", s, r, c, ms(h[10], h[11]), ms(h[12], h[13]),
          h[14] / hz / step * 100, us(h[14], h[8]), us(h[17], h[8])
      }
    }
    for (i = 1; i <= ns; i++) {
      s = srv[i]
      for (k = 1; k <= nmax[s]; k++) tmp[k] = maxrate[s, k]
      mmax[s] = nmax[s] ? med(tmp, nmax[s]) : 0
      for (k = 1; k <= nc[s]; k++) tmp[k] = ccpu[s, k]
      mcpu[s] = nc[s] ? med(tmp, nc[s]) : 0
      for (k = 1; k <= nc[s]; k++) tmp[k] = cdo[s, k]
      mdo[s] = nc[s] ? med(tmp, nc[s]) : 0
      for (k = 1; k <= nc[s]; k++) tmp[k] = cra[s, k]
      mra[s] = nc[s] ? med(tmp, nc[s]) : 0
    }
    for (j = 2; j <= ns; j++) {
      b = srv[j]
      printf "\nRatios %s / %s (medians over the rounds):\n\n", a, b
      print "| figure | ratio | better for " a " when |"
      print "| --- | ---: | --- |"
      if (mmax[b] > 0) printf "| completed exchanges/s at the highest rate with <= %s%% lost | **%.2f** | higher |\n", maxdrop, mmax[a] / mmax[b]
      else printf "| completed exchanges/s at the highest rate with <= %s%% lost | n/a (%s passed no step) | higher |\n", maxdrop, b
      if (mcpu[a] > 0) printf "| capacity at the common rate (%s CPU per exchange / %s CPU per exchange) | %.2f | higher |\n", b, a, mcpu[b] / mcpu[a]
      if (mdo[b] > 0) printf "| DISCOVER-OFFER average latency at the common rate | %.2f | lower |\n", mdo[a] / mdo[b]
      if (mra[b] > 0) printf "| REQUEST-ACK average latency at the common rate | %.2f | lower |\n", mra[a] / mra[b]
    }
  }' "$W/steps.tsv" >"$RESULT"

# Kea's matrix: each configuration's figures per round, its best per figure, and the check.
if [[ $PEER == kea ]]; then
  MATRIX=$W/matrix.tsv
  WHYFILE=$W/why.tsv
  : >"$MATRIX"
  while IFS=$'\t' read -r name _ what value; do
    [[ -n ${KEA_CONF[$name]:-} ]] || continue
    case $what in
      max) matrix_add "$MATRIX" kea "${KEA_CONF[$name]}" "completed exchanges/s+" "$value" ;;
      cpu) matrix_add "$MATRIX" kea "${KEA_CONF[$name]}" "CPU us/exchange at the common rate-" "$value" ;;
    esac
  done <"$W/perround.tsv"
  matrix_why "$WHYFILE"
  # okd-appliance's medians, against Kea's best configuration per figure.
  okd_med() { awk -F'\t' -v w="$1" '$1 == "okd-appliance" && $3 == w {print $4}' "$W/perround.tsv" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
  OKD_MAX=$(okd_med max)
  OKD_CPU=$(okd_med cpu)
  read -r KEA_BEST_MAX KEA_BEST_MAX_CONF < <(matrix_best "$MATRIX" kea "completed exchanges/s+") || true
  read -r KEA_BEST_CPU KEA_BEST_CPU_CONF < <(matrix_best "$MATRIX" kea "CPU us/exchange at the common rate-") || true
  {
    echo
    echo "Against Kea at its best per figure (medians over the rounds): completed exchanges/s $(awk -v a="$OKD_MAX" -v b="${KEA_BEST_MAX:-0}" 'BEGIN {if (b > 0) printf "%.2fx", a / b; else print "n/a"}') (best: ${KEA_BEST_MAX_CONF:-none}; a lower bound where perfdhcp's core is the limit), capacity (Kea's CPU per exchange / okd-appliance's) **$(awk -v a="${OKD_CPU:-0}" -v b="${KEA_BEST_CPU:-0}" 'BEGIN {if (a > 0 && b > 0) printf "%.2fx", b / a; else print "n/a"}')** (best: ${KEA_BEST_CPU_CONF:-none})."
    echo
    echo "Kea's configurations in the tables above: $(for k in "${!KEA_CONF[@]}"; do echo "$k: ${KEA_CONF[$k]}"; done | sort | paste -sd';' | sed 's/;/; /g')."
    echo
    matrix_md "$MATRIX" "$WHYFILE"
  } >>"$RESULT"
fi

{
  echo
  echo "Every step (round, server, offered rate/s, DISCOVERs sent, OFFERs, REQUESTs, ACKs, completed/s, lost %, DO avg/max ms, RA avg/max ms, server CPU ticks, perfdhcp CPU s, pass, server user ticks, UDP receive-buffer drops in the server / client namespace):"
  echo
  echo '```'
  column -t -s $'\t' "$W/steps.tsv" 2>/dev/null || cat "$W/steps.tsv"
  echo '```'
} >"$W/steps.md"

echo
cat "$RESULT"
cat "$W/steps.md"
echo
log "done in ${ELAPSED} s"
if [[ -n ${MATRIX:-} ]] && ! matrix_check "$MATRIX" "$WHYFILE" >"$W/unexplained" 2>&1; then
  die "Kea's configurations differ by more than 2x without a note in WHY: $(cat "$W/unexplained")"
fi

# --- docs/performance.md -----------------------------------------------------------------------
if [[ ${NO_DOC:-0} != 1 ]]; then
  DOC=${DOC:-$ROOT/docs/performance.md}
  rev=$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown)
  dirty=$(cd "$ROOT" && git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo " with uncommitted changes" || true)
  cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
  perfdhcp_v=$(perfdhcp -v 2>&1 | awk '/VERSION/ {print $2; exit}')
  dnsmasq_v=$(dnsmasq -v | awk 'NR == 1 {print $3}')
  NOISE_END=$(noise_count 'dnsperf|perfdhcp')
  ((NOISE_END > NOISE_MAX)) && NOISE_MAX=$NOISE_END
  body=$W/doc-section.md
  if [[ $PEER == kea ]]; then
    kea_v=$(kea-dhcp4 -v 2>&1 | head -n 1)
    if [[ $LIKE_KEA == 1 ]]; then
      heading="DHCP vs Kea, same durability"
      command='sudo PEER=kea LIKE_KEA=1 bash bench/dhcp.sh'
      durability="Durability like for like: Kea's memfile appends to its CSV lease file without syncing it
(an ACKed lease lives in the page cache until the kernel writes it back), and here
okd-appliance's state directory is on tmpfs, so its fdatasync before each group's ACKs returns at
once: neither waits for a disk. okd-appliance is unchanged (no setting skips its sync); only
where its journal lives differs. The durable figure is in \`DHCP vs Kea\`."
      target="leases per second at least 1.5× Kea's at <= 1% lost, with the same durability as Kea"
    else
      heading="DHCP vs Kea"
      command='sudo PEER=kea bash bench/dhcp.sh'
      durability="Durability is not like for like: okd-appliance fdatasyncs its lease journal before each group's
ACKs (durable); Kea's memfile appends to its CSV lease file without syncing it (an ACKed lease can
be lost with the machine). This ratio favours Kea; \`DHCP vs Kea, same durability\` has
okd-appliance with Kea's durability (\`LIKE_KEA=1\`)."
      target="leases per second at least 1.5× Kea's at <= 1% lost, both durable before the ACK (Kea is not: see above)"
    fi
    {
      cat <<EOF
## $heading

Command: \`$command\`, run $(date -u '+%Y-%m-%d %H:%M UTC') on okd-appliance $rev$dirty.
Machine: $(nproc) cores ($cpu), no KVM; work directory on $FS_TYPE. perfdhcp $perfdhcp_v, kea-dhcp4 $kea_v.
Same method as the dnsmasq run below (perfdhcp ladder, one server at a time on CPU 0, $ROUNDS rounds).
Kea: memfile with \`persist: true\`, the same pool, reservations and lease time, UDP sockets.

$durability

Reading the first table's last column: a step fails where the server drops requests (its
receive buffer overflows: drops on the server side) or where perfdhcp, alone on CPU 1, can no
longer take the replies in (drops on the client side, perfdhcp CPU near 100%). In the second
case the load tool, not the server, set the ceiling, and the server's figure is a lower bound.
EOF
      if ((NOISE_MAX > 0 || BUSY_AT_START > 10)); then
        echo "- Note: up to $NOISE_MAX build/test/load processes ran during this run (machine ${BUSY_AT_START}% busy before it)."
      fi
      echo
      cat "$RESULT"
      echo
      # The performance issue's target, judged on the capacity against Kea at its best (CPU per
      # exchange): the rate ratio measures perfdhcp once its core is full.
      ratio=$(awk -v a="${OKD_CPU:-0}" -v b="${KEA_BEST_CPU:-0}" 'BEGIN {if (a > 0 && b > 0) printf "%.2f", b / a}')
      if [[ -z $ratio ]]; then
        verdict="**not measured**"
      elif awk -v r="$ratio" 'BEGIN {exit !(r + 0 >= 1.5)}'; then
        verdict="**met**"
      else
        verdict="**not met**"
      fi
      echo "Target (performance issue): $target, judged on capacity (CPU per exchange) against Kea's best configuration, since the rate is perfdhcp's once its core is full: measured ${ratio:-n/a}×: $verdict."
      if [[ -s $PROFILE_MD ]]; then
        echo
        cat "$PROFILE_MD"
      fi
    } >"$body"
    replace_doc_section "$DOC" "$heading" "$body"
    log "wrote the $heading section of $DOC"
    exit 0
  fi
  {
    cat <<EOF
## DHCP

Command: \`sudo bash bench/dhcp.sh\` (bench/dhcp.sh), run $(date -u '+%Y-%m-%d %H:%M UTC') on okd-appliance $rev$dirty.
Machine: $(nproc) cores ($cpu), no KVM; work directory on $FS_TYPE. perfdhcp $perfdhcp_v, dnsmasq $dnsmasq_v.
Absolute numbers from this machine are noise: the ratio against the peer in the same run is the figure.

The target (leases per second at least 1.5× Kea) is measured in the \`DHCP vs Kea\` section
(\`PEER=kea\`); this one compares with dnsmasq.

Durability, as both run here: okd-appliance appends the lease changes of a group of requests
to its journal and fdatasyncs it once before the group's ACKs leave (group commit: the sync
runs off the event loop, OFFERs keep leaving meanwhile, and the next group is whatever was
decided while it ran). dnsmasq 2.90
is durable per ACK too, but dearer: after each lease change it truncates its lease file,
rewrites every lease, fsyncs, and only then sends the ACK (seen with strace: \`ftruncate\`,
\`fsync\`, then \`sendmsg\`, one fsync per ACK), so its cost per ACK grows with the number of
leases ($CLIENTS clients here) and it cannot batch. Both wait for the disk, so the disk's sync
latency weighs on both figures, dnsmasq's most.

How: one server at a time in a network namespace, pinned to CPU 0 (okd-appliance
\`TOKIO_WORKER_THREADS=1\`, dnsmasq single-threaded); perfdhcp in a second namespace across a
veth pair, pinned to CPU 1, acting as a relay (giaddr $CLI_IP) and sending to $SRV_IP. Both
serve one cluster config: a /$PREFIX, a dynamic pool of $POOL_SIZE addresses, $LEASE_TIME leases, 5
reservations (dnsmasq: \`okd-appliance render --format dnsmasq\` of it, plus
\`--dhcp-authoritative\`, \`--no-ping\` as okd-appliance does not ping either, a lease limit above
the pool, \`--quiet-dhcp\`; okd-appliance with \`RUST_LOG=warn\`, so neither logs per packet).
okd-appliance's state directory and dnsmasq's lease file are on the same $FS_TYPE file system.
perfdhcp runs full 4-way exchanges (\`perfdhcp -4 -l IFACE -r RATE -R $CLIENTS -p $STEP -W 1000000\`,
$CLIENTS distinct clients, below the pool size so it never runs out). For each server a fresh
process with an empty lease table climbs a rate ladder ($RATES exchanges/s, $STEP s each, a
failing step retried once) until more than $MAX_DROP% of the exchanges (DISCOVERs without an
ACK) are lost or perfdhcp cannot send 95% of the offered rate; $ROUNDS rounds, the order rotating.
*Max rate* is the highest step passed; *completed exchanges/s* counts ACKs over the step.
Latencies are perfdhcp's average and maximum DISCOVER→OFFER and REQUEST→ACK delays at that step.
*Server CPU* is the server's utime+stime (whole process, all threads, from /proc) as a share of
one core; *CPU µs/exchange* divides it by the completed exchanges (*of which user*: the rest is
the kernel: sockets, the veth pair, the file system and its syncs). The *common rate* is the
highest step both servers passed in the round: latency and CPU there compare the two at one load.
*UDP rcvbuf drops* are the datagrams the kernel dropped for a full socket receive buffer in the
server's / perfdhcp's namespace (/proc/net/snmp) during the failing step: who fell behind.
A server whose CPU at its ceiling is well under 100% while its namespace drops datagrams at the
next step stalled rather than ran out of CPU: both servers stop reading while they wait for
their disk sync, and one slow sync (the maximum latencies show them) overflows the receive
buffer. The ceiling then follows the disk's worst syncs during the step and varies run to run.
EOF
    if ((NOISE_MAX > 0 || BUSY_AT_START > 10)); then
      echo "- Note: up to $NOISE_MAX build/test/load processes ran during this run (machine ${BUSY_AT_START}% busy before it)."
    fi
    if [[ -s $W/notes ]]; then
      echo "- Note: the time budget stopped a ladder before a step failed: $(tr '\n' ';' <"$W/notes")."
    fi
    echo
    cat "$RESULT"
    echo
    if [[ -s $PROFILE_MD ]]; then
      cat "$PROFILE_MD"
      echo
    fi
  } >"$body"
  replace_doc_section "$DOC" DHCP "$body"
  log "wrote the DHCP section of $DOC"
fi
