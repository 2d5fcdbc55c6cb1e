#!/usr/bin/env bash
# Load-balancer benchmark: okd-appliance against HAProxy (`mode tcp`, `nbthread 1`, the same
# pools and TCP checks, from `okd-appliance render --format haproxy` of the same YAML), in one
# run, on this machine.
#
#   sudo bash bench/lb.sh
#
# Topology: the balancer in lbsrv<PID> on CPU 0 (10.95.0.1); two backends (nginx, one worker
# each, keep-alive) and the client in lbcli<PID> on CPU 1 (10.95.0.21, .22 and .99), over a veth
# pair: with two cores the load tool and the backends share one. The ingress-http frontend
# (port 80) is measured; both balancers use TCP checks (inter 1s fall 2 rise 2); HAProxy's config
# is the rendered one, which has `option splice-auto` and `option redispatch`.
# HAProxy runs in every configuration of its matrix (HAPROXY_MATRIX): `option splice-auto` on
# (as rendered) and off, each with `nbthread 1`, and splice off with per-connection logging off
# (`option dontlog-normal`, the quickest for short connections), and that with
# `option tcp-smart-accept` and `option tcp-smart-connect`; okd-appliance is compared with HAProxy's best
# configuration per figure and the whole matrix is printed. The script fails when HAProxy's best
# and worst configurations differ by more than 2x in a figure and no option that tells them
# apart has a note in WHY (printed with the matrix).
#   1. req/s: wrk (one thread, CONNS connections, SECS s) on a 4 KiB file, keep-alive: requests
#      over long-lived connections through the balancer; and conn/s: the same with
#      `Connection: close`, a new TCP connection through the balancer per request. Beside each,
#      the balancer's CPU time (user+system, /proc) per request.
#   2. throughput: iperf3 (PARALLEL streams, SECS s) through the ingress-https frontend (port
#      443) to one iperf3 server on the first backend: the second backend has nothing on 443,
#      so both balancers hold it down and every stream reaches the one server (iperf3's control
#      and data connections must meet there). Beside it, PARALLEL curl downloads of a BIG_MB
#      file from nginx through port 80 (MiB/s).
#   3. added latency: wrk with one connection and `Connection: close` (LAT_SECS s, thousands
#      of sequential requests, each on a new connection) straight to a backend, then through the
#      balancer, in every round; the difference of wrk's p50 and p99 latencies.
#   4. failover: one backend is killed while a client sends requests one after another; the
#      time until the balancer logs it down, and how many requests failed in the 4 s after:
#      all of them, and those that started after the killed backend was gone (new connections
#      the balancer should have sent to the live backend; the others were in flight on it).
#
# Environment knobs (defaults in brackets):
#   ROUNDS [3] (each: okd-appliance and every HAProxy configuration, order rotating; the table has the medians)
#   CONNS [32]  SECS [5]  PARALLEL [4]  BIG_MB [512]  LAT_SECS [4]
#   SKIP_BUILD=1  NO_DOC=1  DOC [docs/performance.md]  KEEP=1  BIN [built unless SKIP_BUILD=1]
#   HAPROXY_MATRIX ["splice-auto=on nbthread=1 conn-log=on", the same with splice-auto=off,
#                  splice-auto=off with conn-log=off, and that with tcp-smart=on (see WHY), one
#                  a line]
#   TCP_TW_REUSE [1] the client namespace's net.ipv4.tcp_tw_reuse (see the topology)
#   BIN_B      a second okd-appliance binary, run as balancer okd-appliance-b in every round
#              beside BIN (an A/B of two builds in one run, the order rotating); the report
#              pairs the two round by round
#   SYSCALLS=1 after the rounds, one more run of each balancer under `strace -f -c` during the
#              conn/s load: its system calls per connection go into the report (slowed down
#              by strace: not in the figures; needs strace)
#   PROFILE_SYS=1 every conn/s run under `perf record -a` (both CPUs: where the load's core
#              goes), kept as sys-BALANCER-ROUND.data with KEEP=1 (read with `perf report
#              --sort cpu,comm` or `--cpu 1 --sort sym`; not in the report)
#   PROFILE=1  after the rounds, one more okd-appliance run under `perf record` (cpu-clock
#              samples: this VM has no PMU) during the conn/s load; the shares by binary and
#              the top functions go into the report (needs perf: apt-get install linux-perf)
set -Eeuo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-32}
SECS=${SECS:-5}
PARALLEL=${PARALLEL:-4}
BIG_MB=${BIG_MB:-512}
LAT_SECS=${LAT_SECS:-4}
BENCH_KEEP_TMP=${KEEP:-0}
SRV_NS=lbsrv$$
CLI_NS=lbcli$$
SRV_IF=ls$$
CLI_IF=lc$$
LB_IP=10.95.0.1
BACKENDS=(10.95.0.21 10.95.0.22)
CLI_IP=10.95.0.99
SRV_CPU=0
LOAD_CPU=1
HAPROXY_MATRIX=${HAPROXY_MATRIX:-"splice-auto=on nbthread=1 conn-log=on
splice-auto=off nbthread=1 conn-log=on
splice-auto=off nbthread=1 conn-log=off
splice-auto=off nbthread=1 conn-log=off tcp-smart=on"}
# Why each option can move HAProxy's figures (what it does; the matrix shows by how much).
declare -A WHY=(
  [splice-auto]="on: HAProxy moves a connection's data from socket to socket with splice(2) through a kernel pipe once it judges the transfer big enough, instead of copying it through its buffers: fewer copies on bulk streams (iperf3, downloads), pipes and extra calls that small exchanges don't need."
  [nbthread]="threads of the one process; held at 1 (okd-appliance runs on one CPU with one worker too)."
  [tcp-smart]="on: \`option tcp-smart-accept\` and \`option tcp-smart-connect\` (HAProxy's defaults in HTTP mode only): accepted sockets and server connections start in delayed-ACK mode (TCP_QUICKACK off), so that the client's request and the server's SYN-ACK are acknowledged by the next data sent instead of by packets of their own (with the pair, up to 3 packets fewer a connection, 2 of them the client's, as its author announced them), the options its users reach for when the session rate matters; in \`mode tcp\` this bench counts no fewer packets with them (*packets a conn*)."
  [conn-log]="on: every connection logged (the bench logs to stderr for the failover step: getsockname, getsockopt, getpid and a writev per connection); off: \`option tcplog\` with \`option dontlog-normal\`, HAProxy's advice for busy sites: only abnormal connections and server state changes are logged (okd-appliance logs connections at debug level only)."
)
declare -A HAPROXY_CONF
SERVERS=(okd-appliance)
if [[ -n ${BIN_B:-} ]]; then
  [[ -x $BIN_B ]] || die "BIN_B=$BIN_B is not an executable"
  SERVERS+=(okd-appliance-b)
fi
matrix_configs haproxy "$HAPROXY_MATRIX" SERVERS HAPROXY_CONF

[[ $EUID -eq 0 ]] || die "run as root: sudo bash bench/lb.sh"
(($(nproc) >= 2)) || die "needs at least 2 CPUs"
export PATH="$PATH:/usr/sbin:/sbin"
for tool in curl taskset haproxy nginx wrk iperf3 python3; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool missing (apt-get install haproxy nginx-light wrk iperf3)"
done

if [[ ${SYSCALLS:-0} == 1 ]]; then
  command -v strace >/dev/null 2>&1 || die "SYSCALLS=1 needs strace (apt-get install strace)"
fi
if [[ ${PROFILE:-0} == 1 ]]; then
  command -v perf >/dev/null 2>&1 || die "PROFILE=1 needs perf (apt-get install linux-perf)"
fi

build_appliance
BUSY_AT_START=$(busy_pct)
NOISE_MAX=$(noise_count curl)
if ((NOISE_MAX > 0 || BUSY_AT_START > 10)); then
  log "warning: $NOISE_MAX build/test/load processes running, machine ${BUSY_AT_START}% busy; numbers will be noisy"
fi

trap bench_cleanup EXIT
trap 'exit 130' INT TERM
BENCH_TMP=$(mktemp -d /tmp/okd-lbbench.XXXXXX)
W=$BENCH_TMP
chmod 755 "$W" # nginx's workers read the docroot

# --- topology ---------------------------------------------------------------------------------
bench_netns_with_resolv "$SRV_NS"
bench_netns_with_resolv "$CLI_NS"
bench_veth "$SRV_NS" "$SRV_IF" "$LB_IP/24" "$CLI_NS" "$CLI_IF" "$CLI_IP/24"
# The conn/s load opens some 50,000 connections in 5 s from one client address to one balancer
# address, and the side that closes first keeps each in TIME_WAIT for 60 s. When the client
# closes first (it does with a balancer that closes both sockets at once after both FINs, as
# HAProxy does), its ports run out: connect(2) searches the whole range for a free one, and the
# rate falls by half or more in some rounds, the balancer's doing nothing. Reusing TIME_WAIT
# ports (with timestamps, as a load generator's host is set up) makes the figure the
# balancer's, whichever side closes first. TCP_TW_REUSE=2 (Linux's default) shows the effect.
ip netns exec "$CLI_NS" sysctl -q -w net.ipv4.tcp_tw_reuse="${TCP_TW_REUSE:-1}"
for b in "${BACKENDS[@]}"; do ip -n "$CLI_NS" addr add "$b/24" dev "$CLI_IF"; done

# --- backends --------------------------------------------------------------------------------
mkdir -p "$W/www" "$W/install_dir" "$W/artifacts"
head -c 4096 /dev/urandom >"$W/www/small.bin"
log "writing a ${BIG_MB} MiB file"
random_file "$W/www/big.bin" "$BIG_MB"
chmod -R a+rX "$W/www"
declare -A BACKEND_PID
start_backend() {
  nginx_conf "$W/nginx-$1.conf" "$1:80" "$W/www"
  ip netns exec "$CLI_NS" taskset -c $LOAD_CPU nginx -c "$W/nginx-$1.conf" &
  BACKEND_PID[$1]=$!
  bench_track $!
  wait_until 10 ip netns exec "$CLI_NS" curl -sf -o /dev/null "http://$1/small.bin" || die "backend $1"
}
for b in "${BACKENDS[@]}"; do start_backend "$b"; done
# The iperf3 server behind port 443 (first backend only: see the header).
ip netns exec "$CLI_NS" taskset -c $LOAD_CPU iperf3 -s -p 443 -B "${BACKENDS[0]}" >"$W/iperf3-server.log" 2>&1 &
bench_track $!
wait_until 10 bash -c "ip netns exec $CLI_NS bash -c 'exec 3<>/dev/tcp/${BACKENDS[0]}/443'" || die "iperf3 server"

# --- the same pools for both balancers -----------------------------------------------------
for role in bootstrap master worker; do
  printf '{"ignition":{"version":"3.2.0"}}\n' >"$W/install_dir/$role.ign"
done
cat >"$W/cluster.yml" <<EOF
version: 1
cluster: { name: bench, base_domain: okd.test }
network: { subnet: 10.95.0.0/24, appliance_ip: $LB_IP }
nodes:
  - { name: master-0, role: master, mac: "52:54:00:00:00:02", ip: 10.95.0.10 }
  - { name: worker-0, role: worker, mac: "52:54:00:00:00:21", ip: ${BACKENDS[0]} }
  - { name: worker-1, role: worker, mac: "52:54:00:00:00:22", ip: ${BACKENDS[1]} }
install: { ignition_dir: ./install_dir, artifacts_dir: ./artifacts }
state_dir: ./state
lb:
  health: { interval: 1s, timeout: 1s, rise: 2, fall: 2, ingress_check: tcp }
listen: { dns: [], dhcp: [], tftp: [], http: [], api: [], machine_config: [], ingress_https: ["$LB_IP:443"], ingress_http: ["$LB_IP:80"] }
EOF
(cd "$W" && "$BIN" render --format haproxy cluster.yml) >"$W/haproxy.cfg.in" || die "render haproxy"
# One thread, as okd-appliance on one CPU; maxconn within this machine's descriptor limit (with
# splice-auto HAProxy also reserves descriptors for its pipes).
# Server state changes go to stderr, where the failover step looks for them.
sed -e 's/^global$/global\n    nbthread 1\n    log stderr format raw local0/' \
  -e 's/^defaults$/defaults\n    log global/' \
  -e 's/maxconn 20000/maxconn 6000/' "$W/haproxy.cfg.in" >"$W/haproxy.cfg"
haproxy -c -f "$W/haproxy.cfg" >/dev/null || die "haproxy -c rejected the rendered config"
grep -q 'option splice-auto' "$W/haproxy.cfg" || die "the rendered HAProxy config has no splice-auto any more: fix HAPROXY_MATRIX's configs"
# One config per configuration of the matrix.
for s in "${!HAPROXY_CONF[@]}"; do
  conf=${HAPROXY_CONF[$s]}
  nbt=$(matrix_opt nbthread "$conf")
  edits=()
  if [[ $(matrix_opt conn-log "$conf") == off ]]; then
    edits=(-e 's/^defaults$/defaults\n    option tcplog\n    option dontlog-normal/')
  fi
  if [[ $(matrix_opt tcp-smart "$conf") == on ]]; then
    edits+=(-e 's/^defaults$/defaults\n    option tcp-smart-accept\n    option tcp-smart-connect/')
  fi
  if [[ $(matrix_opt splice-auto "$conf") == off ]]; then
    sed -e '/option splice-auto/d' "$W/haproxy.cfg"
  else
    cat "$W/haproxy.cfg"
  fi | sed -e "s/^    nbthread 1$/    nbthread ${nbt:-1}/" "${edits[@]}" >"$W/$s.cfg"
  haproxy -c -f "$W/$s.cfg" >/dev/null || die "haproxy -c rejected $s.cfg ($conf)"
done

start_lb() {
  local cmd
  case $1 in
    okd-appliance) cmd=("$BIN" serve "$W/cluster.yml") ;;
    okd-appliance-b) cmd=("$BIN_B" serve "$W/cluster.yml") ;;
    haproxy*) cmd=(haproxy -db -f "$W/$1.cfg") ;;
  esac
  (cd "$W" && exec ip netns exec "$SRV_NS" taskset -c $SRV_CPU "${cmd[@]}") >"$W/$1.log" 2>&1 &
  LB_PID=$!
  bench_track "$LB_PID"
  # Both backends up: a few requests in a row answered.
  wait_until 15 bash -c "for i in 1 2 3 4; do ip netns exec $CLI_NS curl -sf -o /dev/null http://$LB_IP/small.bin || exit 1; done" ||
    die "$1 did not start serving (log: $W/$1.log)"
  sleep 2.5 # both backends past `rise`
}

# Packets both ways over the veth pair, which every packet of the load crosses (client to
# balancer, balancer to backends).
veth_packets() {
  local d=/sys/class/net/$SRV_IF/statistics
  echo $(($(ip netns exec "$SRV_NS" cat "$d/rx_packets") + $(ip netns exec "$SRV_NS" cat "$d/tx_packets")))
}

# wrk through the balancer: prints requests/s. $1: keep-alive or close.
wrk_rate() {
  local extra=()
  [[ $1 == close ]] && extra=(-H "Connection: close")
  ip netns exec "$CLI_NS" taskset -c $LOAD_CPU wrk -t1 -c"$CONNS" -d"${SECS}s" "${extra[@]}" \
    "http://$LB_IP/small.bin" >"$W/wrk.out" 2>&1 || die "wrk failed: $(cat "$W/wrk.out")"
  grep -q "Non-2xx" "$W/wrk.out" && die "wrk saw errors through the balancer: $(cat "$W/wrk.out")"
  if grep -q "Socket errors" "$W/wrk.out"; then
    log "$(grep "Socket errors" "$W/wrk.out" | sed 's/^ *//')"
  fi
  awk '/^Requests\/sec:/ {printf "%.0f\n", $2}' "$W/wrk.out"
}

throughput() {
  local i t0 t1 pids=() want=$((BIG_MB * 1024 * 1024))
  t0=$(date +%s.%N)
  for ((i = 0; i < PARALLEL; i++)); do
    ip netns exec "$CLI_NS" taskset -c $LOAD_CPU curl -s -o /dev/null -w '%{size_download}\n' \
      "http://$LB_IP/big.bin" >"$W/big.$i" &
    pids+=($!)
  done
  wait "${pids[@]}"
  t1=$(date +%s.%N)
  for ((i = 0; i < PARALLEL; i++)); do
    [[ $(cat "$W/big.$i") == "$want" ]] || die "download $i got $(cat "$W/big.$i") bytes"
  done
  awk -v a="$t0" -v b="$t1" -v n=$((want * PARALLEL)) 'BEGIN {printf "%.0f\n", n / (b - a) / 1048576}'
}

# iperf3 with PARALLEL streams for SECS s to $1:443: prints the MiB/s the server received. A try
# can meet the server busy with a health check's connection: up to three tries.
iperf_rate() {
  local try
  for try in 1 2 3; do
    if ip netns exec "$CLI_NS" taskset -c $LOAD_CPU timeout $((SECS + 20)) \
      iperf3 -c "$1" -p 443 -P "$PARALLEL" -t "$SECS" -J >"$W/iperf3.json" 2>&1; then
      python3 -c 'import json, sys; print(round(json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"] / 8 / 1048576))' "$W/iperf3.json" && return
    fi
    log "iperf3 to $1, try $try: $(head -c 300 "$W/iperf3.json")"
    sleep 1
  done
  die "iperf3 to $1 failed three times"
}

# p50 and p99 in microseconds of LAT_SECS s of sequential requests to $1, each on a new
# connection (wrk -c1, `Connection: close`, --latency).
latency() {
  ip netns exec "$CLI_NS" taskset -c $LOAD_CPU wrk -t1 -c1 -d"${LAT_SECS}s" --latency \
    -H "Connection: close" "$1" >"$W/wrk-latency.out" 2>&1 || die "wrk failed: $(cat "$W/wrk-latency.out")"
  awk 'function us(v) {
         if (v ~ /us$/) return v + 0
         if (v ~ /ms$/) return v * 1000
         if (v ~ /s$/) return v * 1e6
         return v
       }
       $1 == "50.000%" || $1 == "50%" {p50 = us($2)}
       $1 == "99.000%" || $1 == "99%" {p99 = us($2)}
       END {if (p50 == "" || p99 == "") exit 1; printf "%.0f %.0f\n", p50, p99}' "$W/wrk-latency.out" ||
    die "no latency distribution in wrk's output: $(cat "$W/wrk-latency.out")"
}

# Kills the second backend under a request loop and starts it again; sets DOWN_MS[$1] (until the
# balancer logged it down) and FAILED[$1] (requests that failed). Not in a subshell: it restarts
# the backend, whose PID the next run needs.
failover() {
  local lb=$1 pattern t0 t1 gone loop victim=${BACKENDS[1]}
  case $lb in
    okd-appliance*) pattern="worker-1: ingress-http backend $victim:80 is down" ;;
    haproxy*) pattern="ingress-http/worker-1 is DOWN" ;;
  esac
  # One line per request: when it started (s.us) and its HTTP status (000: no answer).
  ip netns exec "$CLI_NS" taskset -c $LOAD_CPU bash -c "
    end=\$((SECONDS + 5))
    while ((SECONDS < end)); do
      echo \"\$EPOCHREALTIME \$(curl -s -o /dev/null --max-time 2 -w '%{http_code}' http://$LB_IP/small.bin)\"
    done" >"$W/failover.$lb" &
  loop=$!
  sleep 1
  t0=$(date +%s%N)
  # SIGKILL to the backend and its children (nginx's worker holds the listening
  # socket, which would keep TCP checks passing).
  local p
  for ((i = 0; i < 5; i++)); do
    for p in $(proc_tree "${BACKEND_PID[$victim]}"); do kill -KILL "$p" 2>/dev/null || true; done
  done
  wait "${BACKEND_PID[$victim]}" 2>/dev/null || true
  gone=$(date +%s.%N) # every process of the backend reaped: its sockets are closed
  t1=""
  for ((i = 0; i < 200; i++)); do
    if grep -qF "$pattern" "$W/$lb.log"; then t1=$(date +%s%N); break; fi
    sleep 0.05
  done
  wait "$loop" || true
  start_backend "$victim"
  FAILED[$lb]=$(awk '$2 != 200' "$W/failover.$lb" | wc -l)
  FAILED_NEW[$lb]=$(awk -v gone="$gone" '$2 != 200 && $1 > gone' "$W/failover.$lb" | wc -l)
  if ((FAILED[$lb] > 0)); then
    log "$lb failover: failed requests (start, status), the backend gone at $gone: $(awk '$2 != 200' "$W/failover.$lb" | tr '\n' ' ')"
  fi
  if [[ -n $t1 ]]; then DOWN_MS[$lb]=$(((t1 - t0) / 1000000)); else DOWN_MS[$lb]=-; fi
}

declare -A PKTS SLEEPS LBUSY RATE CPU KEEP KCPU TPUT IPERF P50 P99 DOWN_MS FAILED FAILED_NEW ALL
declare -A FAILED_ROUNDS
sum() { printf '%s\n' "$@" | awk '{s += $1} END {print s + 0}'; }
# Median of the numbers in the arguments ("-" when there are none).
median() { printf '%s\n' "$@" | grep -E '^-?[0-9]+$' | sort -n | awk '{v[NR] = $1} END {print NR ? v[int((NR + 1) / 2)] : "-"}'; }
median_f() { printf '%s\n' "$@" | grep -E '^[0-9.]+$' | sort -g | awk '{v[NR] = $1} END {print NR ? v[int((NR + 1) / 2)] : "-"}'; }
: >"$W/matrix.tsv"
DIRECT_IPERF=$(iperf_rate "${BACKENDS[0]}")
log "direct: iperf3 $DIRECT_IPERF MiB/s"
for ((round = 1; round <= ROUNDS; round++)); do
  # Rotate the order, so drift in the machine hits every balancer alike.
  order=()
  for ((k = 0; k < ${#SERVERS[@]}; k++)); do order+=("${SERVERS[$(((k + round - 1) % ${#SERVERS[@]}))]}"); done
  for s in "${order[@]}"; do
    log "round $round, $s: starting"
    start_lb "$s"
    ticks0=$(proc_tree_ticks "$LB_PID")
    k=$(wrk_rate keep-alive)
    ticks1=$(proc_tree_ticks "$LB_PID")
    # The balancer's CPU (user+system) per request, in microseconds.
    kc=$(((ticks1 - ticks0) * 1000000 / $(getconf CLK_TCK) / (k * SECS)))
    ticks0=$(proc_tree_ticks "$LB_PID")
    srv0=$(cpu_ticks $SRV_CPU) load0=$(cpu_ticks $LOAD_CPU) sleeps0=$(proc_tree_sleeps "$LB_PID") pkts0=$(veth_packets)
    if [[ ${PROFILE_SYS:-0} == 1 ]]; then
      perf record -q -a -e cpu-clock -F 999 -g -o "$W/sys-$s-$round.data" -- sleep "$SECS" >/dev/null 2>&1 &
      sys_pid=$!
    fi
    r=$(wrk_rate close)
    [[ ${PROFILE_SYS:-0} == 1 ]] && wait "$sys_pid"
    srv1=$(cpu_ticks $SRV_CPU) load1=$(cpu_ticks $LOAD_CPU) sleeps1=$(proc_tree_sleeps "$LB_PID") pkts1=$(veth_packets)
    ticks1=$(proc_tree_ticks "$LB_PID")
    c=$(((ticks1 - ticks0) * 1000000 / $(getconf CLK_TCK) / (r * SECS)))
    # How busy each core was meanwhile (the one that is full sets the rate), how often the
    # balancer went to sleep (each a wake-up another core pays for) and the packets each
    # connection took, both ways on both sides.
    lbusy=$(cpu_busy_pct "$load0" "$load1")
    sleeps=$(awk -v s=$((sleeps1 - sleeps0)) -v n=$((r * SECS)) 'BEGIN {printf "%.2f", n ? s / n : 0}')
    pkts=$(awk -v s=$((pkts1 - pkts0)) -v n=$((r * SECS)) 'BEGIN {printf "%.1f", n ? s / n : 0}')
    busy="CPU $SRV_CPU $(cpu_busy_pct "$srv0" "$srv1")% CPU $LOAD_CPU $lbusy%, $sleeps sleeps and $pkts packets a connection"
    t=$(throughput)
    ip=$(iperf_rate "$LB_IP")
    # Straight to the backend just before, so the machine's drift cancels out.
    read -r d50 d99 < <(latency "http://${BACKENDS[0]}/small.bin")
    read -r p50 p99 < <(latency "http://$LB_IP/small.bin")
    failover "$s"
    if [[ -n ${HAPROXY_CONF[$s]:-} ]]; then
      for f in "req/s keep-alive+=$k" "CPU us per req-=$kc" "conn/s+=$r" "CPU us per conn-=$c" "iperf3 MiB/s+=$ip" "curl MiB/s+=$t"; do
        matrix_add "$W/matrix.tsv" haproxy "${HAPROXY_CONF[$s]}" "${f%=*}" "${f##*=}"
      done
    fi
    log "round $round, $s${HAPROXY_CONF[$s]:+ (${HAPROXY_CONF[$s]})}: $k req/s keep-alive ($kc us CPU each), $r conn/s ($c us CPU each; $busy), $t MiB/s curl, $ip MiB/s iperf3, added p50 $((p50 - d50)) us p99 $((p99 - d99)) us (direct $d50 / $d99 us), down after ${DOWN_MS[$s]} ms, ${FAILED[$s]} failed (${FAILED_NEW[$s]} after the backend was gone)"
    ALL[$s,rate]+=" $r"
    ALL[$s,cpu]+=" $c"
    ALL[$s,pkts]+=" $pkts"
    ALL[$s,sleeps]+=" $sleeps"
    ALL[$s,lbusy]+=" $lbusy"
    ALL[$s,keep]+=" $k"
    ALL[$s,kcpu]+=" $kc"
    ALL[$s,tput]+=" $t"
    ALL[$s,iperf]+=" $ip"
    ALL[$s,p50]+=" $((p50 - d50))"
    ALL[$s,p99]+=" $((p99 - d99))"
    ALL[direct,p50]+=" $d50"
    ALL[direct,p99]+=" $d99"
    ALL[$s,down]+=" ${DOWN_MS[$s]}"
    ALL[$s,failed]+=" ${FAILED[$s]}"
    ALL[$s,failed_new]+=" ${FAILED_NEW[$s]}"
    stop_pid "$LB_PID" 5 || true
  done
done
for s in "${SERVERS[@]}"; do
  # shellcheck disable=SC2086
  {
    RATE[$s]=$(median ${ALL[$s,rate]})
    CPU[$s]=$(median ${ALL[$s,cpu]})
    PKTS[$s]=$(median_f ${ALL[$s,pkts]})
    SLEEPS[$s]=$(median_f ${ALL[$s,sleeps]})
    LBUSY[$s]=$(median ${ALL[$s,lbusy]})
    KEEP[$s]=$(median ${ALL[$s,keep]})
    KCPU[$s]=$(median ${ALL[$s,kcpu]})
    TPUT[$s]=$(median ${ALL[$s,tput]})
    IPERF[$s]=$(median ${ALL[$s,iperf]})
    P50[$s]=$(median ${ALL[$s,p50]})
    P99[$s]=$(median ${ALL[$s,p99]})
    DOWN_MS[$s]=$(median ${ALL[$s,down]})
    # Failed requests: the sum over the rounds, and in how many rounds any failed.
    FAILED[$s]=$(sum ${ALL[$s,failed]})
    FAILED_NEW[$s]=$(sum ${ALL[$s,failed_new]})
    FAILED_ROUNDS[$s]=$(printf '%s\n' ${ALL[$s,failed]} | awk '$1 > 0' | wc -l)
  }
done

WHYFILE=$W/why.tsv
matrix_why "$WHYFILE"
# HAProxy at its best per figure: the value (matrix_best prints "value configuration").
hbest() { matrix_best "$W/matrix.tsv" haproxy "$1" | cut -d' ' -f1; }
hbestconf() { matrix_best "$W/matrix.tsv" haproxy "$1" | cut -d' ' -f2-; }

# shellcheck disable=SC2086
DIRECT50=$(median ${ALL[direct,p50]})
# shellcheck disable=SC2086
DIRECT99=$(median ${ALL[direct,p99]})

# --- system calls ----------------------------------------------------------------------------
# Each balancer's system calls per connection under the conn/s load: `strace -f -c` attached to
# all its threads while wrk opens a connection per request, the calls (and errors) divided by
# the requests wrk completed. Health checks run meanwhile (about 10 calls a probe, 4 probes/s:
# two pools of two backends): some 0.05 calls a connection at the ~700 conn/s strace leaves,
# alike for every balancer.
SYSCALLS_MD=$W/syscalls.md
if [[ ${SYSCALLS:-0} == 1 ]]; then
  for s in "${SERVERS[@]}"; do
    log "system calls: $s under the conn/s load"
    start_lb "$s"
    strace -f -c -q -o "$W/strace.$s" -p "$LB_PID" &
    st=$!
    sleep 1 # attached to every thread
    r=$(wrk_rate close)
    n=$(awk '/requests in/ {print $1}' "$W/wrk.out")
    kill -INT "$st"
    wait "$st" || true
    stop_pid "$LB_PID" 5 || true
    # strace -c: % time, seconds, usecs/call, calls, [errors,] syscall.
    awk -v n="$n" -v s="$s" '$1 ~ /^[0-9.]+$/ && NF >= 5 && $NF != "total" {
        name = $NF; calls = $4; errors = (NF == 6 ? $5 : 0)
        printf "%s\t%s\t%.2f\t%.2f\n", s, name, calls / n, errors / n
      }' "$W/strace.$s" >>"$W/syscalls.tsv"
    log "system calls: $s: $n connections under strace ($r conn/s)"
  done
  {
    echo "### System calls per connection (conn/s load, under strace)"
    echo
    echo "\`sudo SYSCALLS=1 bash bench/lb.sh\`: \`strace -f -c -p PID\` on each balancer during wrk \`-t1 -c$CONNS -d${SECS}s -H 'Connection: close'\`, the calls divided by wrk's completed requests (errors in brackets, EAGAIN and EINPROGRESS among them)."
    echo
    python3 - "$W/syscalls.tsv" "${SERVERS[@]}" <<'PY'
import collections, sys
rows = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    server, name, calls, errors = line.rstrip("\n").split("\t")
    rows[name][server] = (float(calls), float(errors))
servers = sys.argv[2:]
print("| syscall | " + " | ".join(servers) + " |")
print("| --- |" + " ---: |" * len(servers))
def cell(v):
    if v is None:
        return "0"
    calls, errors = v
    return f"{calls:.2f}" + (f" ({errors:.2f})" if errors else "")
order = sorted(rows, key=lambda name: -max(c for c, _ in rows[name].values()))
for name in order:
    if max(c for c, _ in rows[name].values()) < 0.01:
        continue
    print(f"| {name} | " + " | ".join(cell(rows[name].get(s)) for s in servers) + " |")
totals = [sum(rows[name].get(s, (0, 0))[0] for name in rows) for s in servers]
print("| **total** | " + " | ".join(f"**{t:.1f}**" for t in totals) + " |")
PY
  } >"$SYSCALLS_MD"
fi

# --- profile ---------------------------------------------------------------------------------
# Where okd-appliance's CPU goes under the conn/s load: samples of its threads (user and kernel
# stacks) while wrk opens a connection per request, summed by binary, system call and function.
PROFILE_MD=$W/profile.md
if [[ ${PROFILE:-0} == 1 ]]; then
  log "profile: okd-appliance under the conn/s load"
  start_lb okd-appliance
  profile_start "$LB_PID" "$W/perf.data" "$SECS"
  r=$(wrk_rate close)
  profile_wait
  stop_pid "$LB_PID" 5 || true
  {
    echo "### Where okd-appliance's CPU goes (conn/s load)"
    echo
    echo "\`sudo PROFILE=1 bash bench/lb.sh\`: \`perf record -e cpu-clock -F 1999 -g\` of the balancer for ${SECS} s of the conn/s load ($r conn/s in that run). $PROFILE_HOW"
    echo
    profile_md "$W/perf.data"
  } >"$PROFILE_MD"
fi

# --- report ----------------------------------------------------------------------------------
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2fx", a / b; else print "-"}'; }
REPORT=$W/lb.md
{
  echo "## Load balancer"
  echo
  echo "\`sudo bash bench/lb.sh\` ($(date -u +%Y-%m-%d), commit $(git -C "$ROOT" rev-parse --short HEAD), $(nproc) CPUs; balancer on CPU $SRV_CPU; two nginx backends and the load on CPU $LOAD_CPU; ingress-http pool, TCP checks, HAProxy $(haproxy -v | head -n 1 | awk '{print $3}') from \`render --format haproxy\` (redispatch; splice-auto on and off, per-connection logs on and off, \`nbthread 1\`: the matrix below))."
  echo "When other work shares the machine (the script warns), rates are not comparable between runs: compare the CPU per request and per connection."
  echo "req/s: wrk, one thread, $CONNS keep-alive connections, ${SECS} s on a 4 KiB file. conn/s: the same with \`Connection: close\` (a new connection through the balancer per request). Throughput: iperf3 with $PARALLEL streams for ${SECS} s through port 443 to one iperf3 server (straight to it: $DIRECT_IPERF MiB/s; iperf3's client and server share CPU $LOAD_CPU), and $PARALLEL parallel curl downloads of ${BIG_MB} MiB from nginx through port 80. Added latency: wrk with one connection, \`Connection: close\`, ${LAT_SECS} s (each request a new connection): p50/p99 through the balancer minus straight to a backend, measured just before in the same round (direct, medians: p50 $DIRECT50 us, p99 $DIRECT99 us)."
  echo
  echo "Medians of $ROUNDS rounds (order rotating); every round's figures are in the log lines the script prints."
  echo
  echo "| balancer | configuration | req/s keep-alive | CPU us per req | conn/s | CPU us per conn | packets a conn | balancer sleeps a conn | load CPU busy % | iperf3 MiB/s | curl MiB/s | added p50 us | added p99 us | failover: down after ms | failed requests, all rounds (rounds with any) | of them started after the backend was gone |"
  echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  for s in "${SERVERS[@]}"; do
    echo "| ${s%%[0-9]*} | ${HAPROXY_CONF[$s]:--} | ${KEEP[$s]} | ${KCPU[$s]} | ${RATE[$s]} | ${CPU[$s]} | ${PKTS[$s]} | ${SLEEPS[$s]} | ${LBUSY[$s]} | ${IPERF[$s]} | ${TPUT[$s]} | ${P50[$s]} | ${P99[$s]} | ${DOWN_MS[$s]} | ${FAILED[$s]} (${FAILED_ROUNDS[$s]} of $ROUNDS) | ${FAILED_NEW[$s]} |"
  done
  echo
  echo "okd-appliance vs HAProxy at its best per figure: req/s keep-alive $(ratio "${KEEP[okd-appliance]}" "$(hbest "req/s keep-alive+")") ($(hbestconf "req/s keep-alive+")), CPU per request $(ratio "${KCPU[okd-appliance]}" "$(hbest "CPU us per req-")") (lower is better; $(hbestconf "CPU us per req-")), conn/s $(ratio "${RATE[okd-appliance]}" "$(hbest "conn/s+")") ($(hbestconf "conn/s+")), CPU per connection $(ratio "${CPU[okd-appliance]}" "$(hbest "CPU us per conn-")") ($(hbestconf "CPU us per conn-")), throughput with iperf3 $(ratio "${IPERF[okd-appliance]}" "$(hbest "iperf3 MiB/s+")") ($(hbestconf "iperf3 MiB/s+")), with curl $(ratio "${TPUT[okd-appliance]}" "$(hbest "curl MiB/s+")") ($(hbestconf "curl MiB/s+"))."
  echo
  if [[ -n ${BIN_B:-} ]]; then
    # Round by round, okd-appliance-b's figure over okd-appliance's: the median and the range.
    paired() {
      python3 -c 'import statistics, sys
a, b = ([float(x) for x in arg.split()] for arg in sys.argv[1:3])
r = sorted(y / x for x, y in zip(a, b) if x > 0)
print(f"{statistics.median(r):.3f}x ({r[0]:.2f}-{r[-1]:.2f})")' "$1" "$2"
    }
    echo "okd-appliance-b (\`BIN_B\`) over okd-appliance (\`BIN\`), paired by round: conn/s $(paired "${ALL[okd-appliance,rate]}" "${ALL[okd-appliance-b,rate]}"), CPU per connection $(paired "${ALL[okd-appliance,cpu]}" "${ALL[okd-appliance-b,cpu]}"), req/s keep-alive $(paired "${ALL[okd-appliance,keep]}" "${ALL[okd-appliance-b,keep]}"), CPU per request $(paired "${ALL[okd-appliance,kcpu]}" "${ALL[okd-appliance-b,kcpu]}"), iperf3 $(paired "${ALL[okd-appliance,iperf]}" "${ALL[okd-appliance-b,iperf]}"), curl $(paired "${ALL[okd-appliance,tput]}" "${ALL[okd-appliance-b,tput]}")."
    echo
  fi
  matrix_md "$W/matrix.tsv" "$WHYFILE"
  echo
  echo "Reading the figures: wrk and both nginx backends share CPU $LOAD_CPU, so when the balancer's CPU is not saturated the rates partly measure that core: compare the CPU per request and per connection. Under the conn/s load that core is the full one (*load CPU busy*), and what the balancer makes it do counts: every packet it sends is received within its own system call (a veth pair delivers on the sender's core), but every packet wrk or nginx sends, and every wake-up of a balancer that went to sleep in epoll_wait (*balancer sleeps*: voluntary context switches of its threads, from /proc), is paid for on CPU $LOAD_CPU. *packets a conn*: both ways over the veth pair (client and backend sides), divided by the connections. Failover: the time from killing a backend until the balancer logs it down, with TCP checks every 1 s and fall 2; both balancers retry a refused connect on the other backend (HAProxy through redispatch). A request that started before the backend was gone may have been in flight on it, where neither balancer can save it (its bytes were already relayed); one that started after it should never fail."
  if [[ -s $SYSCALLS_MD ]]; then
    echo
    cat "$SYSCALLS_MD"
  fi
  if [[ -s $PROFILE_MD ]]; then
    echo
    cat "$PROFILE_MD"
  fi
} >"$REPORT"
cat "$REPORT"
if ! matrix_check "$W/matrix.tsv" "$WHYFILE" >"$W/unexplained" 2>&1; then
  die "HAProxy's configurations differ by more than 2x without a note in WHY: $(cat "$W/unexplained")"
fi
if [[ ${NO_DOC:-0} != 1 ]]; then
  replace_doc_section "${DOC:-$ROOT/docs/performance.md}" "Load balancer" "$REPORT"
  log "updated ${DOC:-docs/performance.md}"
fi
