#!/usr/bin/env bash
# HTTP boot-server benchmark: okd-appliance against nginx (`sendfile on`, one worker) when it is
# installed, and busybox httpd (always here, a floor rather than a target), in one run.
#
#   sudo bash bench/http.sh
#
# Every server serves the same directory from a server namespace pinned to CPU 0; the load
# runs in a client namespace pinned to CPU 1, over a veth pair:
#   1. big: PARALLEL curl downloads at once of a BIG_MB artifact (aggregate MiB/s, every
#      download's size checked), and the server's resident memory (VmRSS, sampled every 0.2 s)
#      at its peak, beside its idle RSS;
#   2. memory: on a freshly started server, the peak RSS with 1 and then MANY concurrent
#      downloads of the same artifact (each fetching RANGE_MB): how memory grows with the
#      number of downloads;
#   3. small: wrk (one thread on CPU 1, CONNS keep-alive connections, SMALL_SECS seconds) on a
#      4 KiB file, ROUNDS times per server with the servers' order rotating each round; the
#      median requests/s. Without wrk (apt-get install wrk), CLIENTS curl processes fetching it
#      REQS times each over one keep-alive connection, a lower bound for fast servers.
#
# Environment knobs (defaults in brackets):
#   BIG_MB [1024]  PARALLEL [20]  RANGE_MB [128]  MANY [50]  CONNS [32]  SMALL_SECS [5]
#   ROUNDS [3]  CLIENTS [4]  REQS [2000]  SKIP_BUILD=1  NO_DOC=1  DOC [docs/performance.md]  KEEP=1
#   PROFILE=1  after the rounds, one more okd-appliance run under `perf record` (cpu-clock
#              samples) during the small-file load; the shares by binary, system call and
#              function go into the report (needs perf: apt-get install linux-perf)
set -Eeuo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

BIG_MB=${BIG_MB:-1024}
PARALLEL=${PARALLEL:-20}
RANGE_MB=${RANGE_MB:-128}
MANY=${MANY:-50}
CLIENTS=${CLIENTS:-4}
REQS=${REQS:-2000}
CONNS=${CONNS:-32}
SMALL_SECS=${SMALL_SECS:-5}
ROUNDS=${ROUNDS:-3}
BENCH_KEEP_TMP=${KEEP:-0}
SRV_NS=hsrv$$
CLI_NS=hcli$$
SRV_IF=hs$$
CLI_IF=hc$$
SRV_IP=10.96.0.1
CLI_IP=10.96.0.2
PORT=8080
SRV_CPU=0
LOAD_CPU=1

[[ $EUID -eq 0 ]] || die "run as root: sudo bash bench/http.sh"
(($(nproc) >= 2)) || die "needs at least 2 CPUs"
export PATH="$PATH:/usr/sbin:/sbin"
for tool in curl taskset busybox; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool missing"
done
SERVERS=(okd-appliance)
if command -v nginx >/dev/null 2>&1; then
  SERVERS+=(nginx)
else
  log "note: nginx is not installed (apt-get install nginx-light): the nginx peer is skipped"
fi
SERVERS+=(busybox-httpd)

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
BENCH_TMP=$(mktemp -d /tmp/okd-httpbench.XXXXXX)
W=$BENCH_TMP
# mktemp makes the directory 0700: nginx's worker (www-data) must be able to read the docroot.
chmod 755 "$W"

# --- topology ---------------------------------------------------------------------------------
bench_netns_with_resolv "$SRV_NS"
bench_netns_with_resolv "$CLI_NS"
bench_veth "$SRV_NS" "$SRV_IF" "$SRV_IP/24" "$CLI_NS" "$CLI_IF" "$CLI_IP/24"

# --- content: the same directory for every server, under /artifacts/ -------------------------
DOCROOT=$W/www
ART=$DOCROOT/artifacts
mkdir -p "$ART" "$W/install_dir"
log "writing a ${BIG_MB} MiB artifact"
random_file "$ART/big.img" "$BIG_MB"
head -c 4096 /dev/urandom >"$ART/small.bin"
chmod 755 "$DOCROOT" "$ART"
chmod 644 "$ART/big.img" "$ART/small.bin"
cat "$ART/big.img" "$ART/small.bin" >/dev/null # page cache, for every server alike
for role in bootstrap master worker; do
  printf '{"ignition":{"version":"3.2.0"}}\n' >"$W/install_dir/$role.ign"
done
cat >"$W/cluster.yml" <<EOF
version: 1
cluster: { name: bench, base_domain: okd.test }
network: { subnet: 10.96.0.0/24, appliance_ip: $SRV_IP }
nodes:
  - { name: master-0, role: master, mac: "52:54:00:00:00:02", ip: 10.96.0.10 }
install: { ignition_dir: ./install_dir, artifacts_dir: ./www/artifacts, base_url: "http://$SRV_IP:$PORT" }
state_dir: ./state
listen: { dns: [], dhcp: [], tftp: [], http: ["$SRV_IP:$PORT"], api: [], machine_config: [], ingress_https: [], ingress_http: [] }
EOF
cat >"$W/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $W/nginx.pid;
error_log $W/nginx-error.log;
events { worker_connections 4096; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  types { application/octet-stream img bin; }
  server { listen $SRV_IP:$PORT; root $DOCROOT; }
}
EOF

start_server() {
  local cmd
  case $1 in
    okd-appliance) cmd=("$BIN" serve "$W/cluster.yml") ;;
    nginx) cmd=(nginx -c "$W/nginx.conf") ;;
    busybox-httpd) cmd=(busybox httpd -f -p "$SRV_IP:$PORT" -h "$DOCROOT") ;;
  esac
  (cd "$W" && exec ip netns exec "$SRV_NS" taskset -c $SRV_CPU "${cmd[@]}") >"$W/$1.log" 2>&1 &
  SERVER_PID=$!
  bench_track "$SERVER_PID"
  wait_until 10 ip netns exec "$CLI_NS" curl -sf -o /dev/null "http://$SRV_IP:$PORT/artifacts/small.bin" ||
    die "$1 did not start (log: $W/$1.log)"
}


# Runs N downloads (curl ARGS...) at once; prints "seconds peak_rss_kb"; fails on a short one.
downloads() {
  local n=$1 expect=$2 i t0 peak=0 rss pids=()
  shift 2
  t0=$(date +%s.%N)
  for ((i = 0; i < n; i++)); do
    ip netns exec "$CLI_NS" taskset -c $LOAD_CPU curl -s -o /dev/null -w '%{size_download}\n' "$@" \
      >"$W/dl.$i" &
    pids+=($!)
  done
  while :; do
    rss=$(proc_tree_rss_kb "$SERVER_PID")
    ((rss > peak)) && peak=$rss
    local running=0 p
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && running=1; done
    ((running)) || break
    sleep 0.2
  done
  wait "${pids[@]}"
  local t1
  t1=$(date +%s.%N)
  for ((i = 0; i < n; i++)); do
    [[ $(cat "$W/dl.$i") == "$expect" ]] || die "download $i got $(cat "$W/dl.$i") bytes, wanted $expect"
  done
  awk -v a="$t0" -v b="$t1" -v p="$peak" 'BEGIN {printf "%.3f %d\n", b - a, p}'
}

# Requests/s on the small file: wrk when installed, else curl.
small_rps() {
  if command -v wrk >/dev/null 2>&1; then
    ip netns exec "$CLI_NS" taskset -c $LOAD_CPU wrk -t1 -c"$CONNS" -d"${SMALL_SECS}s" \
      "http://$SRV_IP:$PORT/artifacts/small.bin" >"$W/wrk.out" 2>&1 || die "wrk failed: $(cat "$W/wrk.out")"
    grep -q "Non-2xx" "$W/wrk.out" && die "wrk saw wrong answers: $(cat "$W/wrk.out")"
    # Timeouts and resets are the server's (busybox httpd times some out): reported, not fatal.
    if grep -q "Socket errors" "$W/wrk.out"; then
      log "$(grep "Socket errors" "$W/wrk.out" | sed 's/^ *//')"
      echo "$(grep "Socket errors" "$W/wrk.out" | sed 's/^ *//')" >>"$W/socket-errors.$CURRENT"
    fi
    awk '/^Requests\/sec:/ {printf "%.0f\n", $2}' "$W/wrk.out"
    return
  fi
  local i t0 t1 pids=()
  for ((i = 0; i < REQS; i++)); do
    printf 'url = "http://%s:%s/artifacts/small.bin"\noutput = "/dev/null"\n' "$SRV_IP" "$PORT"
  done >"$W/small.curl"
  t0=$(date +%s.%N)
  for ((i = 0; i < CLIENTS; i++)); do
    ip netns exec "$CLI_NS" taskset -c $LOAD_CPU curl -sf -K "$W/small.curl" &
    pids+=($!)
  done
  wait "${pids[@]}" || die "a small-file client failed"
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" -v n=$((CLIENTS * REQS)) 'BEGIN {printf "%.0f\n", n / (b - a)}'
}

declare -A TPUT PEAK IDLE ONE MANYPEAK RPS
BIG_BYTES=$((BIG_MB * 1024 * 1024))
RANGE_BYTES=$((RANGE_MB * 1024 * 1024))
URL=http://$SRV_IP:$PORT/artifacts/big.img
for s in "${SERVERS[@]}"; do
  log "$s: starting"
  start_server "$s"
  sleep 0.5
  IDLE[$s]=$(proc_tree_rss_kb "$SERVER_PID")
  read -r secs peak < <(downloads "$PARALLEL" "$BIG_BYTES" "$URL")
  TPUT[$s]=$(awk -v b=$((BIG_BYTES * PARALLEL)) -v s="$secs" 'BEGIN {printf "%.0f", b / s / 1048576}')
  PEAK[$s]=$peak
  log "$s: $PARALLEL x ${BIG_MB} MiB in ${secs}s = ${TPUT[$s]} MiB/s, peak RSS $((peak / 1024)) MiB (idle $((IDLE[$s] / 1024)) MiB)"
  # A fresh server for the memory step: an allocator keeps what the big step used.
  stop_pid "$SERVER_PID" 5 || true
  start_server "$s"
  read -r _ ONE[$s] < <(downloads 1 "$RANGE_BYTES" -r "0-$((RANGE_BYTES - 1))" "$URL")
  if [[ $s == busybox-httpd ]]; then
    # busybox httpd forks a process per connection: its memory grows with them by design.
    MANYPEAK[$s]=-
  else
    read -r _ MANYPEAK[$s] < <(downloads "$MANY" "$RANGE_BYTES" -r "0-$((RANGE_BYTES - 1))" "$URL")
  fi
  log "$s: peak RSS 1 download $((ONE[$s] / 1024)) MiB, $MANY downloads ${MANYPEAK[$s]} KiB"
  stop_pid "$SERVER_PID" 5 || true
done

# Small files: ROUNDS rounds, the servers' order rotating, the median of each.
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
declare -A SMALL
for ((r = 0; r < ROUNDS; r++)); do
  n=${#SERVERS[@]}
  for ((k = 0; k < n; k++)); do
    s=${SERVERS[$(((k + r) % n))]}
    CURRENT=$s
    start_server "$s"
    sleep 0.3
    v=$(small_rps)
    SMALL[$s]="${SMALL[$s]:-} $v"
    log "round $((r + 1)): $s small file $v req/s"
    stop_pid "$SERVER_PID" 5 || true
  done
done
for s in "${SERVERS[@]}"; do
  # shellcheck disable=SC2086
  RPS[$s]=$(median ${SMALL[$s]})
done

# --- profile ---------------------------------------------------------------------------------
# Where okd-appliance's CPU goes serving the small file (the closest ratio to nginx).
PROFILE_MD=$W/profile.md
if [[ ${PROFILE:-0} == 1 ]]; then
  log "profile: okd-appliance under the small-file load"
  CURRENT=okd-appliance
  start_server okd-appliance
  sleep 0.3
  profile_start "$SERVER_PID" "$W/perf.data" "$SMALL_SECS"
  v=$(small_rps)
  profile_wait
  stop_pid "$SERVER_PID" 5 || true
  {
    echo "### Where okd-appliance's CPU goes (small files)"
    echo
    echo "\`sudo PROFILE=1 bash bench/http.sh\`: \`perf record -e cpu-clock -F 1999 -g\` of okd-appliance for ${SMALL_SECS} s of the small-file load ($v req/s in that run). $PROFILE_HOW"
    echo
    profile_md "$W/perf.data"
  } >"$PROFILE_MD"
fi

# --- report ----------------------------------------------------------------------------------
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2fx", a / b; else print "-"}'; }
mib() { [[ $1 == - ]] && echo - || echo "$(($1 / 1024))"; }
REPORT=$W/http.md
{
  echo "## HTTP boot server"
  echo
  echo "\`sudo bash bench/http.sh\` ($(date -u +%Y-%m-%d), $(nproc) CPUs; server on CPU $SRV_CPU, the load (curl, wrk) on CPU $LOAD_CPU, over a veth pair)."
  echo "Commit $(git -C "$ROOT" rev-parse --short HEAD). Big: $PARALLEL parallel downloads of a ${BIG_MB} MiB artifact. Memory: peak resident set of the server with 1 and $MANY concurrent ${RANGE_MB} MiB downloads."
  if command -v wrk >/dev/null 2>&1; then
    echo "Small: wrk, one thread, $CONNS keep-alive connections, ${SMALL_SECS} s on a 4 KiB file; median of $ROUNDS rounds, the servers' order rotating (all runs: ${SMALL[okd-appliance]# } for okd-appliance)."
  else
    echo "Small: $CLIENTS curl clients x $REQS keep-alive requests for a 4 KiB file (wrk is not installed: curl is the load generator, a lower bound)."
  fi
  echo
  echo "| server | big MiB/s | peak RSS MiB (idle) | RSS 1 / $MANY downloads MiB | small req/s |"
  echo "| --- | ---: | ---: | ---: | ---: |"
  for s in "${SERVERS[@]}"; do
    echo "| $s | ${TPUT[$s]} | $(mib "${PEAK[$s]}") ($(mib "${IDLE[$s]}")) | $(mib "${ONE[$s]}") / $(mib "${MANYPEAK[$s]}") | ${RPS[$s]} |"
  done
  for s in "${SERVERS[@]}"; do
    [[ -f $W/socket-errors.$s ]] && echo "wrk socket errors against $s: $(paste -sd';' "$W/socket-errors.$s")."
  done
  echo
  for s in "${SERVERS[@]:1}"; do
    echo "okd-appliance vs $s: big throughput $(ratio "${TPUT[okd-appliance]}" "${TPUT[$s]}"), small req/s $(ratio "${RPS[okd-appliance]}" "${RPS[$s]}")."
  done
  command -v nginx >/dev/null 2>&1 || echo "nginx is not installed (apt-get install nginx-light): the busybox httpd figures are a floor, not the target."
  echo
  echo "Reading the figures: all three servers send file bodies with sendfile(2) (okd-appliance through hyper, see docs/architecture.md), so file pages go to the socket without passing through user space and a download holds no buffer: okd-appliance's memory does not grow with the number of downloads; busybox httpd forks a process per connection instead. Big-file throughput is bound by the kernel's copy to the veth on this machine and varies by about 20% from run to run: compare ratios over several runs. Small files: hyper keeps connections alive, busybox httpd closes each one."
  if [[ -s $PROFILE_MD ]]; then
    echo
    cat "$PROFILE_MD"
  fi
} >"$REPORT"
cat "$REPORT"
if [[ ${NO_DOC:-0} != 1 ]]; then
  replace_doc_section "${DOC:-$ROOT/docs/performance.md}" "HTTP boot server" "$REPORT"
  log "updated ${DOC:-docs/performance.md}"
fi
