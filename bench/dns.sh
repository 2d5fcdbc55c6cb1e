#!/usr/bin/env bash
# DNS benchmark: okd-appliance against the servers it replaces, in one run, on this machine.
#
#   sudo bash bench/dns.sh
#
# Authoritative: okd-appliance, NSD, Knot, BIND, dnsmasq and hickory-dns serve the same zones (rendered by
# `okd-appliance render --format bind|dnsmasq` from one cluster config) and answer the same
# dnsperf query mix. Forwarding with a warm cache: okd-appliance, dnsmasq and BIND forward
# `*.example.test` to an upstream dnsmasq; every cache is warmed first.
#
# Topology (names carry this script's PID, so parallel runs never collide):
#   bld<PID> (load, 10.98.0.250) --veth-- bsrv<PID> (servers: 10.98.0.1 okd-appliance,
#        .11 NSD, .12 Knot, .13 BIND, .14 dnsmasq, .15 hickory-dns, .21 dnsmasq forwarder,
#        .22 BIND forwarder;
#        10.98.1.2) --veth-- bup<PID> (upstream dnsmasq, 10.98.1.1)
# Traffic stays inside these namespaces. Every server runs pinned to CPU 0 with one worker, the
# load tool pinned to CPU 1. All servers run at once (idle unless queried), and the runs are
# interleaved: ROUNDS rounds, each giving every server one DURATION-second full-speed dnsperf
# run and one LAT_DURATION-second run at a fixed rate every server sustains, the order
# rotating each round, so that drift in the machine (other work, the hypervisor) hits every
# server alike. Reported per server, as medians over the rounds: QPS, average latency and the
# server's CPU time per answered query (utime+stime of its whole process tree from /proc,
# before/after each full-speed run), plus the QPS range and lost queries; and average and p99
# latency at the fixed rate (`dnsperf -v`, one line per answer). With two cores the load tool
# may not saturate a fast server: the CPU per query is then the fairer figure, and the
# server's CPU use (%) says which case applies.
#
# Environment knobs (defaults in brackets):
#   ROUNDS [3]          interleaved full-speed rounds
#   DURATION [6]        seconds of each full-speed run
#   LAT_DURATION [2]    seconds of each fixed-rate latency run
#   LAT_QPS [20000]     offered rate of the latency runs
#   CLIENTS [4]         dnsperf -c
#   OUTSTANDING [100]   dnsperf -q
#   OTHER_MAX [15]      a run during which other work used more than this % of a core is
#                       repeated once (after waiting up to 20 s for quiet) ...
#   RETRY_BUDGET [60]   ... while the repeats have taken less than this many seconds
#   SKIP_INSTALL=1      don't call apt-get (the tools must be there)
#   SKIP_BUILD=1        use the existing target/release/okd-appliance
#   NO_DOC=1            don't rewrite docs/performance.md
#   KEEP=1              keep the work directory (logs, configs, dnsperf outputs)
#   HICKORY [auto]      the hickory-dns binary (the Rust DNS server built on hickory-server, the
#                       crate the product's design first named): auto builds it once with
#                       `cargo install hickory-dns` (default features) into
#                       /var/cache/okd-bench/hickory; 0 leaves it out
#   WORKERS [1]         2: the multi-core run: every server gets two workers and both CPUs
#                       (okd-appliance TOKIO_WORKER_THREADS=2, NSD server-count 2 with
#                       reuseport, Knot 2 UDP workers, BIND -n 2, hickory-dns --workers 2;
#                       dnsmasq has one thread), dnsperf shares the two CPUs with them, and the
#                       report goes to the `DNS on two cores` section (no targets: those are
#                       for one worker)
#   SYSCALLS [auto]     count each server's system calls per answer during the full-speed runs
#                       with `perf stat -e raw_syscalls:sys_enter` (1, 0, or auto: when perf can)
#   PROFILE [0]         1: `perf record` okd-appliance, NSD and Knot during their authoritative
#                       full-speed run of the last round, and add where each one's time goes
#                       (by binary, by system call, top user-space functions) to the report
set -Eeuo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-6}
LAT_DURATION=${LAT_DURATION:-2}
LAT_QPS=${LAT_QPS:-20000}
CLIENTS=${CLIENTS:-4}
OUTSTANDING=${OUTSTANDING:-100}
OTHER_MAX=${OTHER_MAX:-15}
RETRY_BUDGET=${RETRY_BUDGET:-60}
BENCH_KEEP_TMP=${KEEP:-0}

SRV_NS=bsrv$$
LOAD_NS=bld$$
UP_NS=bup$$
SRV_IP=10.98.0.1 # okd-appliance: the appliance address of the cluster config
LOAD_IP=10.98.0.250
UP_IP=10.98.1.1
SRV_UP_IP=10.98.1.2
DOMAIN=okd.bench.example.com
WORKERS=${WORKERS:-1}
case $WORKERS in
  1)
    SRV_CPU=0
    LOAD_CPU=1
    ;;
  2)
    SRV_CPU=0,1
    LOAD_CPU=0,1
    ;;
  *) die "WORKERS is 1 or 2" ;;
esac
# NSD spreads its server processes over one socket each only with reuseport.
NSD_REUSEPORT=no
((WORKERS == 1)) || NSD_REUSEPORT=yes

# The servers: test/name -> address. okd-appliance answers both tests from one process.
declare -A ADDR=(
  [auth/okd-appliance]=$SRV_IP [auth/nsd]=10.98.0.11 [auth/knot]=10.98.0.12
  [auth/bind]=10.98.0.13 [auth/dnsmasq]=10.98.0.14 [auth/hickory-dns]=10.98.0.15
  [fwd/okd-appliance]=$SRV_IP [fwd/dnsmasq]=10.98.0.21 [fwd/bind]=10.98.0.22
)
AUTH_SERVERS=(okd-appliance nsd knot bind dnsmasq)
FWD_SERVERS=(okd-appliance dnsmasq bind)

[[ $EUID -eq 0 ]] || die "run as root: sudo bash bench/dns.sh"
(($(nproc) >= 2)) || die "needs at least 2 CPUs (servers on CPU $SRV_CPU, load on CPU $LOAD_CPU)"

# --- tools -----------------------------------------------------------------------------------
export PATH="$PATH:/usr/sbin:/sbin"
need_pkgs=()
for pair in dnsperf:dnsperf nsd:nsd knotd:knot named:bind9 dnsmasq:dnsmasq dig:bind9-dnsutils; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need_pkgs+=("${pair#*:}")
done
if ((${#need_pkgs[@]})); then
  [[ ${SKIP_INSTALL:-0} == 1 ]] && die "missing packages: ${need_pkgs[*]}"
  log "installing ${need_pkgs[*]} (waiting for the apt lock if needed)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq || log "warning: apt-get update failed; trying the install anyway"
  # A policy-rc.d may keep the packaged daemons from starting: good, we start our own.
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
    dnsperf nsd knot bind9 bind9-dnsutils dnsmasq >/dev/null
fi

build_appliance

HICKORY=${HICKORY:-auto}
HICKORY_VERSION=0.26.3
if [[ $HICKORY == auto ]]; then
  HICKORY=/var/cache/okd-bench/hickory/bin/hickory-dns
  if [[ ! -x $HICKORY ]]; then
    log "building hickory-dns $HICKORY_VERSION (cargo install, default features; once)"
    cargo install --quiet --locked hickory-dns --version "$HICKORY_VERSION" --root /var/cache/okd-bench/hickory ||
      die "cargo install hickory-dns failed (HICKORY=0 leaves it out)"
  fi
fi
if [[ $HICKORY != 0 ]]; then
  [[ -x $HICKORY ]] || die "HICKORY=$HICKORY is not an executable"
  AUTH_SERVERS+=(hickory-dns)
fi

BUSY_AT_START=$(busy_pct)
NOISE_MAX=$(noise_count)
if ((NOISE_MAX > 0 || BUSY_AT_START > 10)); then
  log "warning: $NOISE_MAX build/test processes running, machine ${BUSY_AT_START}% busy; numbers will be noisy"
fi

trap bench_cleanup EXIT
trap 'exit 130' INT TERM
BENCH_TMP=$(mktemp -d /tmp/okd-dnsbench.XXXXXX)
W=$BENCH_TMP
START=$SECONDS

# --- topology --------------------------------------------------------------------------------
log "namespaces $SRV_NS, $LOAD_NS, $UP_NS"
bench_netns_add "$SRV_NS"
bench_netns_add "$LOAD_NS"
bench_netns_add "$UP_NS"
ip link add "vs$$" netns "$SRV_NS" type veth peer name "vl$$" netns "$LOAD_NS"
ip link add "vx$$" netns "$SRV_NS" type veth peer name "vu$$" netns "$UP_NS"
for ip in $(printf '%s\n' "${ADDR[@]}" | sort -u); do
  ip -n "$SRV_NS" addr add "$ip/24" dev "vs$$"
done
ip -n "$SRV_NS" addr add "$SRV_UP_IP/24" dev "vx$$"
ip -n "$LOAD_NS" addr add "$LOAD_IP/24" dev "vl$$"
ip -n "$UP_NS" addr add "$UP_IP/24" dev "vu$$"
ip -n "$SRV_NS" link set "vs$$" up
ip -n "$SRV_NS" link set "vx$$" up
ip -n "$LOAD_NS" link set "vl$$" up
ip -n "$UP_NS" link set "vu$$" up

in_load() { ip netns exec "$LOAD_NS" "$@"; }

# --- cluster config and zones ----------------------------------------------------------------
mkdir -p "$W/cluster/install_dir" "$W/cluster/artifacts" "$W/cluster/state"
for role in bootstrap master worker; do
  printf '{"ignition":{"version":"3.2.0"}}\n' >"$W/cluster/install_dir/$role.ign"
done
CFG=$W/cluster/cluster.yml
cat >"$CFG" <<EOF
# The lab cluster (1 bootstrap, 3 masters, 2 workers) on the benchmark's own addresses.
version: 1
cluster:
  name: okd
  base_domain: bench.example.com
network:
  subnet: 10.98.0.0/24
  gateway: $SRV_IP
  appliance_ip: $SRV_IP
  upstream_dns: ["$UP_IP"]
  ntp: [$SRV_IP]
  mtu: 1500
  lease_time: 12h
  dhcp_pool: { start: 10.98.0.100, end: 10.98.0.150 }
nodes:
  - { name: bootstrap, role: bootstrap, mac: "52:54:00:00:00:07", ip: 10.98.0.7 }
  - { name: master-0, role: master, mac: "52:54:00:00:00:02", ip: 10.98.0.2 }
  - { name: master-1, role: master, mac: "52:54:00:00:00:03", ip: 10.98.0.3 }
  - { name: master-2, role: master, mac: "52:54:00:00:00:04", ip: 10.98.0.4 }
  - { name: worker-0, role: worker, mac: "52:54:00:00:00:05", ip: 10.98.0.5 }
  - { name: worker-1, role: worker, mac: "52:54:00:00:00:06", ip: 10.98.0.6 }
install:
  ignition_dir: ./install_dir
  artifacts_dir: ./artifacts
  install_dev: /dev/vda
dns:
  rate_limit: { responses_per_second: 0 }
  records:
    - { name: registry, type: A, value: $SRV_IP }
    - { name: nfs, type: CNAME, value: registry }
listen: {dns: ["$SRV_IP:53"], dhcp: [], http: [], api: [], machine_config: [], ingress_https: [], ingress_http: []}
state_dir: ./state
EOF
"$BIN" check "$CFG" >"$W/check.out" 2>&1 || {
  cat "$W/check.out" >&2
  die "okd-appliance check rejected the benchmark config"
}
mkdir -p "$W/zones"
# One file per zone, named after its origin plus "zone".
"$BIN" render "$CFG" --format bind -o "$W/zones" --serial 1 >/dev/null
ZONES=()
for f in "$W/zones"/*.zone; do
  z=$(basename "$f" .zone)
  ZONES+=("${z%.}")
done
((${#ZONES[@]} >= 2)) || die "render produced ${#ZONES[@]} zone file(s)"
log "zones: ${ZONES[*]}"
"$BIN" render "$CFG" --format dnsmasq >"$W/dnsmasq-rendered.conf"

# --- query files -----------------------------------------------------------------------------
# 30% api/api-int, 30% wildcard apps names (thousands of distinct labels), 20% node A, 10% PTR,
# 10% NXDOMAIN; shuffled with a fixed seed so every run and every server gets the same file.
awk -v d="$DOMAIN" 'BEGIN {
  srand(42)
  n = 20000
  split("bootstrap master-0 master-1 master-2 worker-0 worker-1", node, " ")
  split("console-openshift-console oauth-openshift downloads-openshift-console canary-openshift-ingress-canary grafana-openshift-monitoring prometheus-k8s-openshift-monitoring alertmanager-main-openshift-monitoring thanos-querier-openshift-monitoring", route, " ")
  for (i = 0; i < n; i++) {
    r = rand()
    if (r < 0.15) q = "api." d " A"
    else if (r < 0.30) q = "api-int." d " A"
    else if (r < 0.60) {
      if (rand() < 0.2) q = route[int(rand() * 8) + 1] ".apps." d " A"
      else q = sprintf("app-%d-ns%d.apps.%s A", int(rand() * 5000), int(rand() * 50), d)
    }
    else if (r < 0.80) q = node[int(rand() * 6) + 1] "." d " A"
    else if (r < 0.90) q = (int(rand() * 7) + 1) ".0.98.10.in-addr.arpa PTR"
    else q = sprintf("missing-%d.%s A", int(rand() * 100000), d)
    printf "%.12f %s\n", rand(), q
  }
}' | sort -n | cut -d' ' -f2- >"$W/auth.txt"

# A few hundred distinct names for the forwarders.
awk 'BEGIN { srand(7); for (i = 0; i < 500; i++) printf "%.12f name%d.example.test A\n", rand(), i }' |
  sort -n | cut -d' ' -f2- >"$W/fwd.txt"

# --- servers ---------------------------------------------------------------------------------
# Each start_* DIR IP writes its config into DIR and starts the daemon in the foreground in the
# server namespace, pinned to CPU $SRV_CPU, listening on IP port 53; PID is the daemon's own
# (`ip netns exec`, `env` and `taskset` all exec).
PID=""
spawn() {
  local dir=$1
  shift
  ip netns exec "$SRV_NS" taskset -c "$SRV_CPU" "$@" >"$dir/out.log" 2>&1 &
  PID=$!
  bench_track "$PID"
}

start_okd() {
  spawn "$1" env TOKIO_WORKER_THREADS="$WORKERS" RUST_LOG=warn NO_COLOR=1 "$BIN" serve "$CFG"
}

start_nsd() {
  local d=$1 ip=$2 z
  {
    cat <<EOF
server:
  server-count: $WORKERS
  ip-address: $ip
  port: 53
  do-ip6: no
  reuseport: $NSD_REUSEPORT
  username: ""
  chroot: ""
  zonesdir: "$W/zones"
  database: ""
  zonelistfile: "$d/zone.list"
  xfrdfile: "$d/xfrd.state"
  xfrdir: "$d"
  pidfile: "$d/nsd.pid"
  verbosity: 1
  hide-version: yes
  rrl-ratelimit: 0
  rrl-whitelist-ratelimit: 0
remote-control:
  control-enable: no
EOF
    for z in "${ZONES[@]}"; do
      printf 'zone:\n  name: %s\n  zonefile: "%s.zone"\n' "$z" "$z"
    done
  } >"$d/nsd.conf"
  spawn "$d" nsd -d -c "$d/nsd.conf"
}

start_knot() {
  local d=$1 ip=$2 z
  mkdir -p "$d/db"
  {
    cat <<EOF
server:
  rundir: "$d"
  user: root:root
  listen: $ip@53
  udp-workers: $WORKERS
  tcp-workers: 1
  background-workers: 1
log:
  - target: stderr
    any: warning
database:
  storage: "$d/db"
control:
  listen: "$d/knot.sock"
template:
  - id: default
    storage: "$W/zones"
    zonefile-sync: -1
    zonefile-load: whole
    journal-content: none
zone:
EOF
    for z in "${ZONES[@]}"; do
      printf '  - domain: %s\n    file: "%s.zone"\n' "$z" "$z"
    done
  } >"$d/knot.conf"
  spawn "$d" knotd -c "$d/knot.conf"
}

bind_options() {
  cat <<EOF
options {
  directory "$1";
  pid-file "$1/named.pid";
  session-keyfile "$1/session.key";
  managed-keys-directory "$1";
  listen-on port 53 { $2; };
  listen-on-v6 { none; };
  dnssec-validation no;
  allow-query { any; };
  querylog no;
EOF
}

start_bind() {
  local d=$1 ip=$2 z
  {
    bind_options "$d" "$ip"
    printf '  recursion no;\n};\ncontrols { };\n'
    for z in "${ZONES[@]}"; do
      printf 'zone "%s" { type primary; file "%s/%s.zone"; };\n' "$z" "$W/zones" "$z"
    done
  } >"$d/named.conf"
  spawn "$d" named -g -n "$WORKERS" -c "$d/named.conf"
}

# hickory-dns with the same zone files, one runtime worker, INFO logging off (-q: it would log
# every query).
start_hickory() {
  local d=$1 ip=$2 z
  {
    # It would drop to user and group "nobody" (Debian's group is "nogroup"); like Knot here, it
    # stays root, and reads the zones in the work directory.
    printf 'listen_addrs_ipv4 = ["%s"]\nlisten_addrs_ipv6 = []\nlisten_port = 53\nuser = "root"\ngroup = "root"\n' "$ip"
    for z in "${ZONES[@]}"; do
      printf '\n[[zones]]\nzone = "%s"\nzone_type = "Primary"\n[zones.stores]\ntype = "file"\nzone_path = "%s.zone"\n' "$z" "$z"
    done
  } >"$d/hickory.toml"
  spawn "$d" "$HICKORY" -q --workers "$WORKERS" -c "$d/hickory.toml" -z "$W/zones"
}

DNSMASQ_COMMON=(--keep-in-foreground --pid-file= --user=root --log-facility=- --bind-interfaces)

start_dnsmasq() {
  local d=$1 ip=$2
  # The rendered config, DNS part only, with the listener lines of this topology.
  {
    sed -n '/^# DHCP/q; p' "$W/dnsmasq-rendered.conf" |
      grep -Ev '^(listen-address|port|interface|bind-interfaces|dhcp-|enable-tftp|tftp-)' || true
    printf 'listen-address=%s\nport=53\n' "$ip"
  } >"$d/dnsmasq.conf"
  spawn "$d" dnsmasq "${DNSMASQ_COMMON[@]}" -C "$d/dnsmasq.conf"
}

start_fwd_dnsmasq() {
  spawn "$1" dnsmasq "${DNSMASQ_COMMON[@]}" -C /dev/null --no-resolv --no-hosts \
    --listen-address="$2" --port=53 --server="$UP_IP" --cache-size=10000
}

start_fwd_bind() {
  local d=$1 ip=$2
  {
    bind_options "$d" "$ip"
    printf '  recursion yes;\n  allow-recursion { any; };\n  forward only;\n'
    printf '  forwarders { %s; };\n};\ncontrols { };\n' "$UP_IP"
  } >"$d/named.conf"
  spawn "$d" named -g -n "$WORKERS" -c "$d/named.conf"
}

# The upstream of the forwarding test: dnsmasq answering every *.example.test name with a
# one-hour TTL, alone in its namespace (it only works during the warm-up passes).
start_upstream() {
  mkdir -p "$W/upstream"
  ip netns exec "$UP_NS" taskset -c "$LOAD_CPU" dnsmasq "${DNSMASQ_COMMON[@]}" -C /dev/null \
    --no-resolv --no-hosts --listen-address="$UP_IP" --port=53 \
    --address=/example.test/192.0.2.10 --local-ttl=3600 >"$W/upstream/out.log" 2>&1 &
  UP_PID=$!
  bench_track "$UP_PID"
}

# answers IP NAME TYPE EXPECTED: the server at IP answers with EXPECTED.
answers() {
  timeout 3 ip netns exec "$LOAD_NS" dig +time=1 +tries=1 +short "@$1" "$2" "$3" 2>/dev/null |
    grep -qx "$4"
}

declare -A PIDOF=()
FAILED=()

# start KEY STARTER READY_NAME READY_VALUE: starts the server KEY (test/name) and waits (15 s at
# most) until it answers READY_NAME A with READY_VALUE.
start() {
  local key=$1 starter=$2 d=$W/${1/\//-}
  mkdir -p "$d"
  "$starter" "$d" "${ADDR[$key]}"
  PIDOF[$key]=$PID
  if ! wait_until 15 answers "${ADDR[$key]}" "$3" A "$4"; then
    log "error: $key did not answer $3 A within 15 s; the end of its log:"
    tail -n 20 "$d/out.log" >&2 || true
    FAILED+=("$key: did not start or answer")
    stop_pid "$PID" || true
    unset "PIDOF[$key]"
    return 0
  fi
  log "$key: PID $PID answers on ${ADDR[$key]}"
}

# --- measuring -------------------------------------------------------------------------------
# dnsperf_field FILE KEY: one figure from dnsperf's summary.
dnsperf_field() {
  [[ -f $1 ]] || return 0
  case $2 in
  sent) awk '/Queries sent:/ {print $3}' "$1" ;;
  completed) awk '/Queries completed:/ {print $3}' "$1" ;;
  lost) awk '/Queries lost:/ {print $3}' "$1" ;;
  qps) awk '/Queries per second:/ {printf "%.0f", $4}' "$1" ;;
  avg_ms) awk '/Average Latency \(s\):/ {printf "%.3f", $4 * 1000}' "$1" ;;
  # "NOERROR 1047564 (90.00%), NXDOMAIN 116396 (10.00%)" -> "NOERROR 90.00%, NXDOMAIN 10.00%"
  rcodes) sed -n 's/^ *Response codes: *//p' "$1" | sed -E 's/ [0-9]+ \(([0-9.]+%)\)/ \1/g' ;;
  resp_size) awk '/Average packet size:/ {print $NF}' "$1" ;;
  esac
}

# "p99 mean" latency in ms from `dnsperf -v` per-answer lines ("> RCODE NAME TYPE SECONDS").
latency_stats() {
  awk '$1 == ">" && $2 != "T" && $2 != "I" {print $NF}' "$1" | sort -g |
    awk '{v[NR] = $1; s += $1} END {
      if (NR == 0) { print "n/a n/a"; exit }
      i = int(NR * 0.99 + 0.5); if (i < 1) i = 1
      printf "%.3f %.3f\n", v[i] * 1000, s / NR * 1000
    }'
}

CLK_TCK=$(getconf CLK_TCK)
# System calls per answer: perf counting the raw_syscalls:sys_enter tracepoint of the server's
# process tree (every thread) during the full-speed run. Counting costs the server little (no
# sampling, no stacks), and every server pays the same.
SYSCALLS=${SYSCALLS:-auto}
if [[ $SYSCALLS == auto ]]; then
  SYSCALLS=0
  command -v perf >/dev/null 2>&1 && perf stat -e raw_syscalls:sys_enter true >/dev/null 2>&1 && SYSCALLS=1
fi
((SYSCALLS)) || log "note: system calls per query are not counted (perf with raw_syscalls:sys_enter unavailable)"
# busy ticks of the whole machine, from /proc/stat (user nice system irq softirq steal)
machine_busy_ticks() { awk '$1 == "cpu" {print $2 + $3 + $4 + $7 + $8 + $9; exit}' /proc/stat; }
# utime+stime of this shell's reaped children (the load tool, once it has exited).
children_ticks() { sed 's/.*) //' /proc/$$/stat | awk '{print $14 + $15}'; }

PROFILED=() # the keys profiled (PROFILE=1)
RUNS=$W/runs.tsv # test name round qps sent completed lost avg_ms ticks cpu_us resp_size rcodes user_us other_pct syscalls_per_query
LATS=$W/lat.tsv  # test name round p99_ms avg_ms lost
: >"$RUNS"
: >"$LATS"

# full_run KEY ROUND: one full-speed run against KEY with its CPU accounting.
full_run() {
  local key=$1 round=$2 pid=${PIDOF[$1]} out t0 t1 completed noise
  out=$W/${key/\//-}/perf-$round.out
  noise=$(noise_count)
  ((noise <= NOISE_MAX)) || NOISE_MAX=$noise
  local u0 s0 u1 s1 m0 m1 l0 l1 foreign
  read -r u0 s0 < <(proc_tree_times "$pid")
  m0=$(machine_busy_ticks)
  l0=$(children_ticks)
  local counter='' syscalls=n/a
  if ((SYSCALLS)); then
    perf stat -x, -e raw_syscalls:sys_enter -o "$out.syscalls" \
      -p "$(proc_tree "$pid" | paste -sd,)" >/dev/null 2>&1 &
    counter=$!
  fi
  local profiled=''
  if ((${PROFILE:-0})) && ((round == ROUNDS)) && [[ $key =~ ^auth/(okd-appliance|nsd|knot)$ ]]; then
    profiled=$W/${key/\//-}/perf.data
    profile_start "$(proc_tree "$pid" | paste -sd,)" "$profiled" "$DURATION"
  fi
  in_load taskset -c "$LOAD_CPU" timeout $((DURATION + 20)) \
    dnsperf -s "${ADDR[$key]}" -d "$W/${key%%/*}.txt" -l "$DURATION" -c "$CLIENTS" -q "$OUTSTANDING" -t 2 \
    >"$out" 2>&1 || log "warning: dnsperf against $key exited with $?"
  if [[ -n $profiled ]]; then
    profile_wait
    PROFILED+=("$key")
  fi
  if [[ -n $counter ]]; then
    kill -INT "$counter" 2>/dev/null
    wait "$counter" 2>/dev/null || true
  fi
  l1=$(children_ticks)
  m1=$(machine_busy_ticks)
  read -r u1 s1 < <(proc_tree_times "$pid")
  t0=$((u0 + s0))
  t1=$((u1 + s1))
  # Whatever else ran on the machine meanwhile, as a share of one core.
  foreign=$(awk -v m=$((m1 - m0 - (t1 - t0) - (l1 - l0))) -v hz="$CLK_TCK" -v d="$DURATION" \
    'BEGIN {if (m < 0) m = 0; printf "%.0f", m / hz / d * 100}')
  LAST_FOREIGN=$foreign
  if ! pid_alive "$pid"; then
    log "error: $key died during the run"
    FAILED+=("$key: died")
    unset "PIDOF[$key]"
    return 0
  fi
  completed=$(dnsperf_field "$out" completed)
  if [[ -z $completed || $completed -eq 0 ]]; then
    log "error: no answers from $key"
    FAILED+=("$key: no answers in round $round")
    return 0
  fi
  if [[ -s $out.syscalls ]]; then
    syscalls=$(awk -F, -v n="$completed" '$3 ~ /raw_syscalls:sys_enter/ && $1 ~ /^[0-9]+$/ {printf "%.2f", $1 / n}' "$out.syscalls")
    [[ -n $syscalls ]] || syscalls=n/a
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "${key%%/*}" "${key#*/}" "$round" \
    "$(dnsperf_field "$out" qps)" "$(dnsperf_field "$out" sent)" "$completed" \
    "$(dnsperf_field "$out" lost)" "$(dnsperf_field "$out" avg_ms)" "$((t1 - t0))" \
    "$(awk -v t=$((t1 - t0)) -v hz="$CLK_TCK" -v n="$completed" 'BEGIN {printf "%.2f", t / hz / n * 1e6}')" \
    "$(dnsperf_field "$out" resp_size)" "$(dnsperf_field "$out" rcodes)" \
    "$(awk -v t=$((u1 - u0)) -v hz="$CLK_TCK" -v n="$completed" 'BEGIN {printf "%.2f", t / hz / n * 1e6}')" \
    "$foreign" "$syscalls" >>"$RUNS"
  log "  $key round $round: $(dnsperf_field "$out" qps) qps, $((t1 - t0)) ticks," \
    "$(awk -F'\t' 'END {print $10}' "$RUNS") us/query, other CPU ${foreign}%$( ((noise == 0)) || echo ", $noise build/test processes running")"
}

# lat_run KEY ROUND: the fixed-rate run with per-answer latencies.
lat_run() {
  local key=$1 round=$2 out p99 avg
  out=$W/${key/\//-}/lat-$round.out
  in_load taskset -c "$LOAD_CPU" timeout $((LAT_DURATION + 20)) \
    dnsperf -s "${ADDR[$key]}" -d "$W/${key%%/*}.txt" -l "$LAT_DURATION" -Q "$LAT_QPS" \
    -c "$CLIENTS" -q "$OUTSTANDING" -t 2 -v >"$out" 2>&1 || log "warning: latency dnsperf against $key exited with $?"
  read -r p99 avg < <(latency_stats "$out")
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "${key%%/*}" "${key#*/}" "$round" "$p99" "$avg" \
    "$(dnsperf_field "$out" lost)" >>"$LATS"
  log "  $key round $round at $LAT_QPS qps: p99 $p99 ms, avg $avg ms"
}

# quiet: the machine outside the benchmark is (nearly) idle over a second.
quiet() { (($(noise_count) == 0 && $(busy_pct) < 10)); }
LAST_FOREIGN=0
REPEATED=0
DISTURBED=0
RETRY_SECONDS=0

# rounds TEST NAME...: ROUNDS interleaved rounds, the order rotating; in each, every server gets
# a full-speed run and then a fixed-rate run.
rounds() {
  local test=$1 r i n key
  shift
  local names=("$@")
  n=${#names[@]}
  for ((r = 1; r <= ROUNDS; r++)); do
    for ((i = 0; i < n; i++)); do
      key=$test/${names[(i + r - 1) % n]}
      [[ -n ${PIDOF[$key]:-} ]] || continue
      local attempt runs_before lats_before
      for attempt in 1 2; do
        runs_before=$(wc -l <"$RUNS")
        lats_before=$(wc -l <"$LATS")
        LAST_FOREIGN=0
        full_run "$key" "$r"
        [[ -n ${PIDOF[$key]:-} ]] && lat_run "$key" "$r"
        # A run disturbed by other work is repeated once, after waiting (20 s at most) for the
        # machine to calm down, while the time budget allows.
        if ((LAST_FOREIGN <= OTHER_MAX || attempt == 2 || RETRY_SECONDS >= RETRY_BUDGET)); then
          ((LAST_FOREIGN <= OTHER_MAX)) || DISTURBED=$((DISTURBED + 1))
          break
        fi
        log "  $key round $r: other work used ${LAST_FOREIGN}% of a core; repeating it"
        head -n "$runs_before" "$RUNS" >"$RUNS.tmp" && mv "$RUNS.tmp" "$RUNS"
        head -n "$lats_before" "$LATS" >"$LATS.tmp" && mv "$LATS.tmp" "$LATS"
        REPEATED=$((REPEATED + 1))
        RETRY_SECONDS=$((RETRY_SECONDS + DURATION + LAT_DURATION))
        local t=$SECONDS
        wait_until 20 quiet || true
        RETRY_SECONDS=$((RETRY_SECONDS + SECONDS - t))
      done
    done
  done
  return 0
}

log "starting the authoritative servers and the forwarders (all on CPU $SRV_CPU, $WORKERS worker(s) each)"
start_upstream
wait_until 10 bash -c "timeout 3 ip netns exec $SRV_NS dig +time=1 +tries=1 +short @$UP_IP probe.example.test A | grep -qx 192.0.2.10" ||
  die "the upstream dnsmasq does not answer: $(tail -n 5 "$W/upstream/out.log")"
start auth/okd-appliance start_okd "api.$DOMAIN" "$SRV_IP"
PIDOF[fwd/okd-appliance]=${PIDOF[auth/okd-appliance]:-}
mkdir -p "$W/fwd-okd-appliance"
[[ -n ${PIDOF[fwd/okd-appliance]} ]] || unset 'PIDOF[fwd/okd-appliance]'
start auth/nsd start_nsd "api.$DOMAIN" "$SRV_IP"
start auth/knot start_knot "api.$DOMAIN" "$SRV_IP"
start auth/bind start_bind "api.$DOMAIN" "$SRV_IP"
start auth/dnsmasq start_dnsmasq "api.$DOMAIN" "$SRV_IP"
[[ $HICKORY == 0 ]] || start auth/hickory-dns start_hickory "api.$DOMAIN" "$SRV_IP"
start fwd/dnsmasq start_fwd_dnsmasq name0.example.test 192.0.2.10
start fwd/bind start_fwd_bind name0.example.test 192.0.2.10

log "authoritative: $ROUNDS rounds; each gives every server ${DURATION}s at full speed and ${LAT_DURATION}s at $LAT_QPS qps"
rounds auth "${AUTH_SERVERS[@]}"

log "forwarding: warming the caches (two passes over $(wc -l <"$W/fwd.txt") names)"
for name in "${FWD_SERVERS[@]}"; do
  key=fwd/$name
  [[ -n ${PIDOF[$key]:-} ]] || continue
  in_load taskset -c "$LOAD_CPU" timeout 30 \
    dnsperf -s "${ADDR[$key]}" -d "$W/fwd.txt" -n 2 -c 1 -q 20 -t 3 >"$W/${key/\//-}/warm.out" 2>&1 || true
  log "  $key warm-up: $(dnsperf_field "$W/${key/\//-}/warm.out" completed) answers," \
    "$(dnsperf_field "$W/${key/\//-}/warm.out" lost) lost"
done
log "forwarding with a warm cache: $ROUNDS rounds of ${DURATION}s at full speed and ${LAT_DURATION}s at $LAT_QPS qps"
rounds fwd "${FWD_SERVERS[@]}"

log "stopping every server"
for key in "${!PIDOF[@]}"; do
  [[ $key == fwd/okd-appliance ]] && continue
  if stop_pid "${PIDOF[$key]}" 5; then
    log "  $key (PID ${PIDOF[$key]}) stopped"
  else
    FAILED+=("$key: would not stop")
  fi
done
stop_pid "$UP_PID" || FAILED+=("upstream: would not stop")
left=$(ip netns pids "$SRV_NS" 2>/dev/null | tr '\n' ' ')
[[ -z ${left// /} ]] || FAILED+=("left in $SRV_NS after stopping: $left")
ELAPSED=$((SECONDS - START))
BUSY_AT_END=$(busy_pct)

# --- report ----------------------------------------------------------------------------------
# One line per server: test name qps_median qps_min qps_max sent lost avg_ms_median cpu_pct
# cpu_us_median resp_size rcodes user_us_median other_cpu_pct_median p99_ms lat_avg_ms
# syscalls_per_query_median
SUMMARY=$W/summary.tsv
summarize() {
  local test name
  for test in auth fwd; do
    local names=("${AUTH_SERVERS[@]}")
    [[ $test == fwd ]] && names=("${FWD_SERVERS[@]}")
    for name in "${names[@]}"; do
      awk -F'\t' -v t="$test" -v n="$name" '$1 == t && $2 == n' "$RUNS" | grep -q . || continue
      {
        awk -F'\t' -v t="$test" -v n="$name" '$1 == t && $2 == n' "$RUNS" |
          awk -F'\t' -v hz="$CLK_TCK" -v dur="$DURATION" '
            function median(a, k,   i, j, x) {  # sorts a[1..k] in place
              for (i = 2; i <= k; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
              return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
            }
            { k++; q[k] = $4; qq[k] = $4; l[k] = $8; c[k] = $10; p[k] = $9 / hz / dur * 100; u[k] = $13; o[k] = $14
              sent += $5; lost += $7; resp = $11; rc = $12 }
            END {
              lo = hi = qq[1]; for (i = 1; i <= k; i++) { if (qq[i] < lo) lo = qq[i]; if (qq[i] > hi) hi = qq[i] }
              printf "%s\t%s\t%.0f\t%s\t%s\t%d\t%d\t%.3f\t%.0f\t%.2f\t%s\t%s\t%.2f\t%.0f", $1, $2, median(q, k), lo, hi,
                sent, lost, median(l, k), median(p, k), median(c, k), resp, rc, median(u, k), median(o, k)
            }'
        awk -F'\t' -v t="$test" -v n="$name" '$1 == t && $2 == n && $4 != "n/a"' "$LATS" |
          awk -F'\t' '
            function median(a, k,   i, j, x) {
              for (i = 2; i <= k; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
              return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
            }
            { k++; p[k] = $4; a[k] = $5 }
            END { if (k) printf "\t%.3f\t%.3f", median(p, k), median(a, k); else printf "\tn/a\tn/a" }'
        awk -F'\t' -v t="$test" -v n="$name" '$1 == t && $2 == n && $15 != "n/a" && $15 != ""' "$RUNS" |
          awk -F'\t' '
            function median(a, k,   i, j, x) {
              for (i = 2; i <= k; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
              return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
            }
            { k++; s[k] = $15 }
            END { if (k) printf "\t%.2f\n", median(s, k); else print "\tn/a" }'
      }
    done
  done >"$SUMMARY"
}
summarize

# get TEST NAME COLUMN: one field of the summary.
get() { awk -F'\t' -v t="$1" -v n="$2" -v c="$3" '$1 == t && $2 == n {print $c}' "$SUMMARY"; }
# ratio A B [DECIMALS]: A / B to two (or DECIMALS) decimals, or n/a.
ratio() {
  awk -v a="$1" -v b="$2" -v d="${3:-2}" 'BEGIN {
    if (a == "" || b == "" || a == "n/a" || b == "n/a" || b + 0 == 0) print "n/a"
    else printf "%." d "f", a / b
  }'
}
ge() { awk -v a="$1" -v b="$2" 'BEGIN {exit !(a != "n/a" && a != "" && a + 0 >= b + 0)}'; }

{
  printf '| test | server | QPS (median) | QPS range | lost/sent | avg ms, full speed | avg ms @%s qps | p99 ms @%s qps | server CPU | CPU µs/query | of which user | system calls/query | other CPU | response B | rcodes |\n' "$LAT_QPS" "$LAT_QPS"
  printf '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n'
  awk -F'\t' '{printf "| %s | %s | %s | %s–%s | %s/%s | %s | %s | %s | %s%% | %s | %s | %s | %s%% | %s | %s |\n",
    $1, $2, $3, $4, $5, $7, $6, $8, $16, $15, $9, $10, $13, $17, $14, $11, $12}' "$SUMMARY"
} >"$W/table.md"

{
  printf '| test | peer | QPS | p99 latency | CPU per query | user CPU per query | capacity |\n'
  printf '| --- | --- | ---: | ---: | ---: | ---: | ---: |\n'
  for test in auth fwd; do
    for peer in $(awk -F'\t' -v t="$test" '$1 == t && $2 != "okd-appliance" {print $2}' "$SUMMARY"); do
      printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$test" "$peer" \
        "$(ratio "$(get "$test" okd-appliance 3)" "$(get "$test" "$peer" 3)")" \
        "$(ratio "$(get "$test" okd-appliance 15)" "$(get "$test" "$peer" 15)")" \
        "$(ratio "$(get "$test" okd-appliance 10)" "$(get "$test" "$peer" 10)")" \
        "$(ratio "$(get "$test" okd-appliance 13)" "$(get "$test" "$peer" 13)")" \
        "$(ratio "$(get "$test" "$peer" 10)" "$(get "$test" okd-appliance 10)")"
    done
  done
} >"$W/ratios.md"

# target TEST PEER FACTOR LABEL: judged on measured QPS and on capacity (CPU per query).
target() {
  local test=$1 peer=$2 factor=$3 label=$4 q c qv cv
  # Judged unrounded: 0.997 is not "at least 1".
  q=$(ratio "$(get "$test" okd-appliance 3)" "$(get "$test" "$peer" 3)" 3)
  c=$(ratio "$(get "$test" "$peer" 10)" "$(get "$test" okd-appliance 10)" 3)
  if ge "$q" "$factor"; then qv="**met**"; else qv="**not met**"; fi
  if ge "$c" "$factor"; then cv="**met**"; else cv="**not met**"; fi
  [[ $q == n/a ]] && qv="**not measured**"
  [[ $c == n/a ]] && cv="**not measured**"
  # Say when a verdict is within the run-to-run spread, or QPS was capped by the load tool.
  awk -v r="$q" -v f="$factor" 'BEGIN {exit !(r != "n/a" && r / f > 0.9 && r / f < 1.1)}' &&
    qv="$qv (within the ~10% run-to-run spread)"
  awk -v r="$c" -v f="$factor" 'BEGIN {exit !(r != "n/a" && r / f > 0.9 && r / f < 1.1)}' &&
    cv="$cv (within the ~10% run-to-run spread)"
  if ge 94 "$(get "$test" okd-appliance 9)" && ge 94 "$(get "$test" "$peer" 9)"; then
    qv="$qv; neither server reached 95% CPU, so the QPS is dnsperf's limit more than theirs"
  fi
  printf -- '- %s (≥ %s×): measured QPS ratio %s: %s. Capacity ratio (CPU per query) %s: %s.\n' \
    "$label" "$factor" "$q" "$qv" "$c" "$cv"
}
# cpu_target PEER MAX LABEL: okd-appliance's authoritative CPU per query at most MAX × PEER's.
cpu_target() {
  local peer=$1 max=$2 label=$3 r v
  r=$(ratio "$(get auth okd-appliance 10)" "$(get auth "$peer" 10)" 3)
  if [[ $r == n/a ]]; then
    v="**not measured**"
  elif ge "$max" "$r"; then
    v="**met**"
  else
    v="**not met**"
  fi
  awk -v r="$r" -v f="$max" 'BEGIN {exit !(r != "n/a" && r / f > 0.9 && r / f < 1.1)}' &&
    v="$v (within the ~10% run-to-run spread)"
  printf -- '- %s (≤ %s×): measured %s: %s.\n' "$label" "$max" "$r" "$v"
}
{
  cpu_target nsd 0.8 "Authoritative CPU per query at most 0.8× NSD's"
  cpu_target knot 0.8 "Authoritative CPU per query at most 0.8× Knot's"
  target fwd dnsmasq 1.5 "Forwarding with a warm cache at least 1.5× dnsmasq"
} >"$W/targets.md"

DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
echo
echo "== DNS benchmark, $DATE, ${ELAPSED}s; medians of $ROUNDS interleaved ${DURATION}s runs"
column -t -s $'\t' <(
  printf 'test\tserver\tQPS\tQPS range\tlost/sent\tavg_ms\tavg_ms@%s\tp99_ms@%s\tcpu%%\tcpu_us/q\tuser_us/q\tsyscalls/q\tother%%\tresp_B\trcodes\n' "$LAT_QPS" "$LAT_QPS"
  awk -F'\t' -v OFS='\t' '{print $1, $2, $3, $4 "-" $5, $7 "/" $6, $8, $16, $15, $9 "%", $10, $13, $17, $14 "%", $11, $12}' "$SUMMARY"
)
echo
echo "ratios okd-appliance / peer (capacity = peer CPU per query / okd-appliance CPU per query):"
column -t -s '|' <(grep -v -- '---' "$W/ratios.md" | sed 's/^| //; s/ |$//')
echo
cat "$W/targets.md"
if ((${#FAILED[@]})); then
  echo
  printf 'problem: %s\n' "${FAILED[@]}"
fi
echo "machine: ${BUSY_AT_START}% CPU busy before, ${BUSY_AT_END}% after; up to $NOISE_MAX build/test processes during the runs;" \
  "$REPEATED runs repeated, $DISTURBED kept although disturbed (other CPU > $OTHER_MAX%)"

# --- docs/performance.md ---------------------------------------------------------------------
if [[ ${NO_DOC:-0} != 1 ]]; then
  REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
  git -C "$ROOT" diff --quiet HEAD -- appliance 2>/dev/null || REV="$REV with uncommitted changes"
  if ((WORKERS == 1)); then
    SECTION=DNS
    COMMAND='sudo bash bench/dns.sh'
    PLACEMENT="every server runs in one network namespace, pinned to CPU 0 with one worker
(okd-appliance \`TOKIO_WORKER_THREADS=1\`, NSD \`server-count: 1\`, Knot one UDP/TCP/background
worker, BIND \`named -n 1\`, dnsmasq is single-threaded, hickory-dns $HICKORY_VERSION \`--workers 1\`
built by \`cargo install hickory-dns\` with its default features); dnsperf runs in a second namespace
across a veth pair, pinned to CPU 1"
  else
    SECTION="DNS on two cores"
    COMMAND='sudo WORKERS=2 bash bench/dns.sh'
    PLACEMENT="the multi-core run: every server runs in one network namespace on both CPUs with two
workers (okd-appliance \`TOKIO_WORKER_THREADS=2\`, NSD \`server-count: 2\` with \`reuseport: yes\`,
Knot two UDP workers, BIND \`named -n 2\`, hickory-dns $HICKORY_VERSION \`--workers 2\`; dnsmasq has
one thread whatever the cores); dnsperf runs in a second namespace across a veth pair and
shares the two CPUs with the server it loads, so QPS here is what the machine as a whole
answers, and the CPU per query is the fairer comparison. The targets of the performance issue
are judged on the one-worker run (\`## DNS\`), not here"
  fi
  {
    cat <<EOF
## $SECTION

Command: \`$COMMAND\`, run $DATE on okd-appliance $REV.
Machine: $(nproc) cores ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), no KVM.
Absolute numbers from this machine are noise: the ratios against the peers measured in the
same run are the figures.

How: $PLACEMENT (\`-c $CLIENTS -q $OUTSTANDING\`). All authoritative servers
serve the same zones, rendered by \`okd-appliance render --format bind\` (dnsmasq: \`--format
dnsmasq\`) from one cluster config (1 bootstrap, 3 masters, 2 workers). The servers run side
by side and the runs are interleaved: $ROUNDS rounds, each giving every server one ${DURATION} s
full-speed run and one ${LAT_DURATION} s run at a fixed $LAT_QPS qps (order rotating), so drift in
the machine hits all alike; figures are medians over the rounds.

- *auth* query mix: 30% api/api-int, 30% names under the \`*.apps\` wildcard (thousands of
  distinct labels), 20% node A records, 10% PTR, 10% NXDOMAIN.
- *fwd*: 500 distinct \`nameN.example.test\` names forwarded to an upstream dnsmasq in a third
  namespace; every cache is warmed with two passes first, so the runs measure cache hits.
- Latency: average at full speed (mostly dnsperf's own queueing), and average and p99 at the
  fixed $LAT_QPS qps that every server sustains (\`dnsperf -v\`, one line per answer).
- *server CPU* is the server's utime+stime (its whole process tree, from /proc) during a
  full-speed run, as a share of one core; *CPU µs/query* divides it by the answers (*of which
  user*: the part spent in user space, the rest is the kernel: sockets, UDP/IP, the veth pair).
  With two cores dnsperf on one core often cannot saturate a fast server (server CPU under
  100%): QPS then partly measures dnsperf, and *capacity* (the peer's CPU per query over
  okd-appliance's: how many more queries okd-appliance answers per CPU second) is the fairer
  comparison.
- *system calls/query*: the server's system calls (every thread of its process tree, counted
  by \`perf stat -e raw_syscalls:sys_enter\` during the full-speed run) per answer. Batching
  (\`recvmmsg\`/\`sendmmsg\`) is what brings it under 1.
- *other CPU* is what everything else on the machine used meanwhile (all CPU time from
  /proc/stat minus the server's and dnsperf's), as a share of one core: above a few percent,
  other work disturbed the run.
- Run to run, QPS and CPU-per-query ratios move by up to ~10%. p99 at the fixed rate is a
  fraction of a millisecond and mostly scheduling jitter of this VM: its ratios are not stable
  between runs.
EOF
    printf -- '- A run during which other work used more than %s%% of a core is repeated once, time\n  permitting: %s runs were repeated, %s disturbed runs kept.\n' "$OTHER_MAX" "$REPEATED" "$DISTURBED"
    if ((NOISE_MAX > 0 || BUSY_AT_START > 10)); then
      printf -- '- Note: up to %s build/test processes ran during this run (machine %s%% busy before it).\n' \
        "$NOISE_MAX" "$BUSY_AT_START"
    fi
    printf '\n'
    cat "$W/table.md"
    printf '\nRatios okd-appliance / peer. Higher is better for okd-appliance in QPS and capacity, lower in p99 latency and CPU per query:\n\n'
    cat "$W/ratios.md"
    if ((WORKERS == 1)); then
      printf '\nTargets (from the performance issue):\n\n'
      cat "$W/targets.md"
    fi
    if ((${#PROFILED[@]})); then
      printf '\nWhere each server'"'"'s time goes (`PROFILE=1`: `perf record -e cpu-clock -F 1999 -g` of\nits process tree during its authoritative full-speed run of round %s; this VM has no PMU). %s\n' \
        "$ROUNDS" "$PROFILE_HOW"
      for key in "${PROFILED[@]}"; do
        printf '\n%s:\n\n' "${key#*/}"
        profile_md "$W/${key/\//-}/perf.data"
      done
    fi
    if ((${#FAILED[@]})); then
      printf '\nProblems in this run:\n\n'
      printf -- '- %s\n' "${FAILED[@]}"
    fi
  } >"$W/report.md"
  replace_doc_section "$ROOT/docs/performance.md" "$SECTION" "$W/report.md"
  log "wrote the $SECTION section of docs/performance.md"
fi
((${#FAILED[@]} == 0))
