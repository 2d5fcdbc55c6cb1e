#!/usr/bin/env bash
# HTTP boot-server benchmark: okd-appliance against nginx (one worker, in every configuration of
# the matrix below) when it is installed, and busybox httpd (always here, a floor rather than a
# target), in one run.
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
#      REQS times each over one keep-alive connection, a lower bound for fast servers. Beside
#      each rate, the server's CPU time (utime+stime of its process tree, /proc) per request:
#      the figure that holds when other work shares the machine.
#
# nginx runs in every configuration its expert users choose between for static files (the
# matrix, NGINX_MATRIX): `sendfile` on/off, `tcp_nopush` on/off (nginx applies it only with
# sendfile, so 6 configurations, not 8) and `open_file_cache` on/off, each one worker pinned like
# okd-appliance. Every configuration is measured in every step and round; okd-appliance is
# compared with nginx's BEST configuration per figure (big MiB/s, small req/s, small CPU per
# request), and the whole matrix is printed. The script fails when nginx's best and worst
# configurations differ by more than 2x in a figure and no option that tells them apart has a
# note in WHY (printed with the matrix).
#
# Environment knobs (defaults in brackets):
#   BIG_MB [1024]  PARALLEL [20]  RANGE_MB [128]  MANY [32]  CONNS [32]  SMALL_SECS [5]
#   ROUNDS [3]  CLIENTS [4]  REQS [2000]  SKIP_BUILD=1  NO_DOC=1  DOC [docs/performance.md]  KEEP=1
#   BIN [target/release/okd-appliance, built unless SKIP_BUILD=1]  NGINX_MATRIX (the
#   configurations, one per line, as "option=value ..."; default: all six)
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
# 32: the boot server holds at most 32 connections per client address (a hardening limit;
# booting nodes each have their own), and every download here comes from one address.
MANY=${MANY:-32}
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
# nginx's matrix: configurations as "option=value ..."; tcp_nopush only exists with sendfile on.
NGINX_MATRIX=${NGINX_MATRIX:-"sendfile=off open_file_cache=off
sendfile=off open_file_cache=on
sendfile=on tcp_nopush=off open_file_cache=off
sendfile=on tcp_nopush=off open_file_cache=on
sendfile=on tcp_nopush=on open_file_cache=off
sendfile=on tcp_nopush=on open_file_cache=on"}
# Why each option can move nginx's figures (what it does; the matrix shows by how much).
declare -A WHY=(
  [sendfile]="on: the file's pages go from the page cache to the socket (no copy through user space), the response head and the body in two calls (writev, sendfile); off: nginx reads the file into its output buffer and sends head and body with one writev. The copy is what off costs on big files, the second call and its second packet what on costs on small ones."
  [tcp_nopush]="with sendfile, TCP_CORK on the socket: partial frames are held until nginx lifts the cork (tcp(7)), so head and file leave in full packets. Meant for big files; a small keep-alive response's only, partial packet waits for the uncork, which is why it can hold the small-file rate far down (15-19k against 96-120k req/s with it off in the re-run of issue #28)."
  [open_file_cache]="keeps open descriptors and their stat results between requests: no open, fstat and close per request, which matters only when the body itself is cheap (small files)."
)
declare -A NGINX_CONF
SERVERS=(okd-appliance)
if command -v nginx >/dev/null 2>&1; then
  matrix_configs nginx "$NGINX_MATRIX" SERVERS NGINX_CONF
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
# One config per configuration of the matrix.
for s in "${!NGINX_CONF[@]}"; do
  conf=${NGINX_CONF[$s]}
  sf=$(matrix_opt sendfile "$conf")
  np=$(matrix_opt tcp_nopush "$conf")
  ofc=$(matrix_opt open_file_cache "$conf")
  {
    echo "worker_processes 1;"
    echo "daemon off;"
    echo "pid $W/$s.pid;"
    echo "error_log $W/$s-error.log;"
    echo "events { worker_connections 4096; }"
    echo "http {"
    echo "  access_log off;"
    echo "  sendfile ${sf:-off};"
    echo "  tcp_nopush ${np:-off};"
    if [[ $ofc == on ]]; then
      echo "  open_file_cache max=1000 inactive=60s;"
      echo "  open_file_cache_valid 60s;"
    fi
    echo "  keepalive_requests 1000000;"
    echo "  types { application/octet-stream img bin; }"
    echo "  server { listen $SRV_IP:$PORT; root $DOCROOT; }"
    echo "}"
  } >"$W/$s.conf"
done

start_server() {
  local cmd
  case $1 in
    okd-appliance) cmd=("$BIN" serve "$W/cluster.yml") ;;
    nginx*) cmd=(nginx -c "$W/$1.conf") ;;
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
  # A failed curl is reported below with the bytes it got, not by `set -e` in silence.
  wait "${pids[@]}" || true
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
  elif [[ $s == nginx* && $s != nginx1 ]]; then
    # Memory with many downloads is the same for every configuration (one worker, buffers
    # of fixed size): the first configuration stands for all.
    MANYPEAK[$s]=-
  else
    read -r _ MANYPEAK[$s] < <(downloads "$MANY" "$RANGE_BYTES" -r "0-$((RANGE_BYTES - 1))" "$URL")
  fi
  log "$s: peak RSS 1 download $((ONE[$s] / 1024)) MiB, $MANY downloads ${MANYPEAK[$s]} KiB"
  stop_pid "$SERVER_PID" 5 || true
done

# Small files: ROUNDS rounds, the servers' order rotating, the median of each.
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
declare -A SMALL SMALLCPU CPUREQ
TCK=$(getconf CLK_TCK)
for ((r = 0; r < ROUNDS; r++)); do
  n=${#SERVERS[@]}
  for ((k = 0; k < n; k++)); do
    s=${SERVERS[$(((k + r) % n))]}
    CURRENT=$s
    start_server "$s"
    sleep 0.3
    t0=$(proc_tree_ticks "$SERVER_PID")
    v=$(small_rps)
    t1=$(proc_tree_ticks "$SERVER_PID")
    # The server's CPU time per request, in microseconds (one decimal).
    c=$(awk -v t=$((t1 - t0)) -v hz="$TCK" -v r="$v" -v secs="$SMALL_SECS" 'BEGIN {printf "%.1f", (r > 0 ? t / hz * 1e6 / (r * secs) : 0)}')
    SMALL[$s]="${SMALL[$s]:-} $v"
    SMALLCPU[$s]="${SMALLCPU[$s]:-} $c"
    log "round $((r + 1)): $s${NGINX_CONF[$s]:+ (${NGINX_CONF[$s]})} small file $v req/s, $c us CPU per request"
    stop_pid "$SERVER_PID" 5 || true
  done
done
medianf() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
MATRIX=$W/matrix.tsv
: >"$MATRIX"
for s in "${SERVERS[@]}"; do
  # shellcheck disable=SC2086
  RPS[$s]=$(median ${SMALL[$s]})
  # shellcheck disable=SC2086
  CPUREQ[$s]=$(medianf ${SMALLCPU[$s]})
  if [[ -n ${NGINX_CONF[$s]:-} ]]; then
    matrix_add "$MATRIX" nginx "${NGINX_CONF[$s]}" "big MiB/s+" "${TPUT[$s]}"
    for v in ${SMALL[$s]}; do matrix_add "$MATRIX" nginx "${NGINX_CONF[$s]}" "small req/s+" "$v"; done
    for v in ${SMALLCPU[$s]}; do matrix_add "$MATRIX" nginx "${NGINX_CONF[$s]}" "small CPU us/req-" "$v"; done
  fi
done
WHYFILE=$W/why.tsv
matrix_why "$WHYFILE"
# nginx at its best per figure: "value configuration".
NGINX_BEST_BIG=""
NGINX_BEST_SMALL=""
NGINX_BEST_CPU=""
if ((${#NGINX_CONF[@]})); then
  NGINX_BEST_BIG=$(matrix_best "$MATRIX" nginx "big MiB/s+")
  NGINX_BEST_SMALL=$(matrix_best "$MATRIX" nginx "small req/s+")
  NGINX_BEST_CPU=$(matrix_best "$MATRIX" nginx "small CPU us/req-")
fi

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
  echo "| server | configuration | big MiB/s | peak RSS MiB (idle) | RSS 1 / $MANY downloads MiB | small req/s | small CPU us/req |"
  echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
  for s in "${SERVERS[@]}"; do
    echo "| ${s%%[0-9]*} | ${NGINX_CONF[$s]:--} | ${TPUT[$s]} | $(mib "${PEAK[$s]}") ($(mib "${IDLE[$s]}")) | $(mib "${ONE[$s]}") / $(mib "${MANYPEAK[$s]}") | ${RPS[$s]} | ${CPUREQ[$s]} |"
  done
  for s in "${SERVERS[@]}"; do
    [[ -f $W/socket-errors.$s ]] && echo "wrk socket errors against $s: $(paste -sd';' "$W/socket-errors.$s")."
  done
  echo
  if [[ -n $NGINX_BEST_SMALL ]]; then
    echo "okd-appliance vs nginx at its best per figure: big throughput $(ratio "${TPUT[okd-appliance]}" "${NGINX_BEST_BIG%% *}") (best: ${NGINX_BEST_BIG#* }), small req/s $(ratio "${RPS[okd-appliance]}" "${NGINX_BEST_SMALL%% *}") (best: ${NGINX_BEST_SMALL#* }), small CPU per request $(ratio "${CPUREQ[okd-appliance]}" "${NGINX_BEST_CPU%% *}") (lower is better; best: ${NGINX_BEST_CPU#* })."
    echo
    matrix_md "$MATRIX" "$WHYFILE"
  fi
  echo "okd-appliance vs busybox-httpd: big throughput $(ratio "${TPUT[okd-appliance]}" "${TPUT[busybox-httpd]}"), small req/s $(ratio "${RPS[okd-appliance]}" "${RPS[busybox-httpd]}")."

  command -v nginx >/dev/null 2>&1 || echo "nginx is not installed (apt-get install nginx-light): the busybox httpd figures are a floor, not the target."
  echo
  echo "Reading the figures: okd-appliance sends file bodies over 16 KiB with sendfile(2) (through hyper, see appliance/src/http/sendfile.rs) and reads smaller ones to send them with the response head in one writev, as nginx does with \`sendfile off\`; big files' pages go to the socket without passing through user space and a download holds no buffer: okd-appliance's memory does not grow with the number of downloads; nginx does the same with \`sendfile on\`; busybox httpd forks a process per connection instead. When other work shares the machine (the log warns), rates are not comparable between runs and the CPU per request is the figure to compare. Big-file throughput is bound by the kernel's copy to the veth on this machine and varies by about 20% from run to run: compare ratios over several runs. Small files: hyper keeps connections alive, busybox httpd closes each one."
  if [[ -s $PROFILE_MD ]]; then
    echo
    cat "$PROFILE_MD"
  fi
} >"$REPORT"
cat "$REPORT"
if [[ -s ${MATRIX:-} ]] && ! matrix_check "$MATRIX" "$WHYFILE" >"$W/unexplained" 2>&1; then
  die "nginx's configurations differ by more than 2x without a note in WHY: $(cat "$W/unexplained")"
fi
if [[ ${NO_DOC:-0} != 1 ]]; then
  replace_doc_section "${DOC:-$ROOT/docs/performance.md}" "HTTP boot server" "$REPORT"
  log "updated ${DOC:-docs/performance.md}"
fi
