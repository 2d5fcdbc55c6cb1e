#!/usr/bin/env bash
# Shared frontend (SNI routing): okd-appliance's router against HAProxy routing by TLS server
# name, and against okd-appliance's own per-cluster frontends (no peek), in one run, on this
# machine.
#
#   sudo bash bench/shared.sh
#   sudo ROUNDS=1 SECS=3 NO_DOC=1 bash bench/shared.sh     (a quick try)
#
# Topology: the balancer in shsrv<PID> on CPU 0; two compact clusters, okd and test
# (lab.example.com, three masters each, only master-0 running): each master-0 is a namespace
# of its own (shokd<PID>, shtest<PID>) on its cluster's segment (10.96.1.0/24, 10.96.2.0/24; the
# appliance_ip is .1, master-0 .2), running nginx with TLS (a self-signed P-256 certificate from
# `openssl req`; one worker; no session cache, no tickets: every connection a full handshake)
# on 443, 6443 and 22623 and plain HTTP on 80, serving a 1 KiB file. The client (wrk) is in
# shcli<PID> (10.96.0.99) on a third segment; the shared frontend is 10.96.0.1, the services
# namespace's end of it. The backends and wrk share CPU 1 (two cores: see "Reading the
# figures" in the report).
#
# The balancers, each started afresh per round, the order rotating round by round:
#   okd-shared  `okd-appliance serve host.yml` with `shared_frontend: { address: 10.96.0.1,
#               default_cluster: okd }`: its router on 10.96.0.1 peeks each ClientHello's
#               server name (MSG_PEEK) and passes the connection to that cluster's pool.
#   okd-own     the same two clusters in a host file without shared_frontend: each cluster's
#               own frontend on its appliance_ip:443, no peek (the cost of the peek is the
#               difference).
#   haproxy*    HAProxy in `mode tcp` on 10.96.0.1, SNI routing as its expert users write it
#               (`tcp-request inspect-delay 5s`, `tcp-request content accept if
#               { req_ssl_hello_type 1 }`, `use_backend ... if { req_ssl_sni -m end
#               .apps.okd.lab.example.com }`, the same for 6443/22623 by name and 80 by Host),
#               the same pools (three masters per cluster and port) and TCP checks, `nbthread 1`
#               (okd-appliance runs on one CPU: one tokio worker), in every configuration of
#               HAPROXY_MATRIX; okd-appliance is compared with its best per figure.
# Both okd-appliance configurations use the checks `lb: { health: { interval: 200ms, timeout:
# 150ms, rise: 2, fall: 2, control_plane_check: tcp, ingress_check: tcp } }`; HAProxy the same
# (`check inter 200ms fall 2 rise 2`, `timeout check 150ms`).
#
# Each round and balancer: two wrk processes at once (one thread, CONNS/2 connections, SECS s,
# `Connection: close`, --latency), one to https://console.apps.okd.lab.example.com/, one to
# https://console.apps.test.lab.example.com/: every request a new TCP connection, a full TLS
# handshake with the server name (wrk sends the URL's host as SNI; the names resolve through
# /etc/netns/shcli<PID>/hosts, to the shared frontend or, for okd-own, to each cluster's
# appliance_ip), one small HTTPS request, then close. Figures: new connections/s (the sum),
# the balancer's CPU time (utime+stime, /proc) per connection, wrk's p50/p99 under that load
# (the mean of the two processes'), and the p50/p99 of LAT_SECS s of one connection at a time
# (wrk -c1, the okd name). For okd-shared, the router's okd_appliance_lb_routed_total{port="443"}
# of each cluster (its /metrics at the cluster's appliance_ip:8080) must have grown by at least
# the requests wrk sent to that cluster's name, or the script stops: the server name was sent
# and routed.
#
# Environment knobs (defaults in brackets):
#   ROUNDS [5]  SECS [10]  CONNS [32]  LAT_SECS [2]  IDLE_SECS [1.5] (the balancer's idle CPU:
#   its health checks, measured after each start)
#   PROFILE=1  after the rounds, one more load of okd-shared and of okd-own under `perf record`
#              (cpu-clock samples); the shares by binary, system call and function go into the
#              report (needs perf)
#   HAPROXY_MATRIX [three configurations, one a line; see below]
#   SKIP_BUILD=1  NO_DOC=1  DOC [docs/performance.md]  KEEP=1  BIN [built unless SKIP_BUILD=1]
#   REV_OF_BIN  with BIN: what the report calls that build (e.g. a commit)
set -Eeuo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

ROUNDS=${ROUNDS:-5}
SECS=${SECS:-10}
CONNS=${CONNS:-32}
LAT_SECS=${LAT_SECS:-2}
IDLE_SECS=${IDLE_SECS:-1.5}
BENCH_KEEP_TMP=${KEEP:-0}
SRV_NS=shsrv$$
CLI_NS=shcli$$
OKD_NS=shokd$$
TEST_NS=shtest$$
SHARED=10.96.0.1
CLI_IP=10.96.0.99
OKD_APP=10.96.1.1
OKD_M0=10.96.1.2
TEST_APP=10.96.2.1
TEST_M0=10.96.2.2
DOMAIN=lab.example.com
OKD_NAME=console.apps.okd.$DOMAIN
TEST_NAME=console.apps.test.$DOMAIN
SRV_CPU=0
LOAD_CPU=1
HAPROXY_MATRIX=${HAPROXY_MATRIX:-"splice-auto=off tcp-smart-connect=off maxaccept=default nbthread=1
splice-auto=on tcp-smart-connect=off maxaccept=default nbthread=1
splice-auto=off tcp-smart-connect=on maxaccept=-1 nbthread=1"}
declare -A WHY=(
  [splice-auto]="on: HAProxy moves data from socket to socket with splice(2) through a kernel pipe once a transfer looks big enough: fewer copies on bulk streams, pipes and extra calls that a handshake and one small response don't need."
  [tcp-smart-connect]="on: HAProxy connects to the server with TCP_DEFER_CONNECT-like behaviour, sending the first data with the handshake's last ACK: one packet less per new connection."
  [maxaccept]="tune.maxaccept: how many connections HAProxy accepts in one go per listener wake-up (default 64 with one thread; -1: unlimited): fewer wake-ups under a connection storm, less fairness."
  [nbthread]="threads of the one process; held at 1 (okd-appliance on one CPU runs one tokio worker)."
)
declare -A HAPROXY_CONF
SERVERS=(okd-shared okd-own)
matrix_configs haproxy "$HAPROXY_MATRIX" SERVERS HAPROXY_CONF

[[ $EUID -eq 0 ]] || die "run as root: sudo bash bench/shared.sh"
(($(nproc) >= 2)) || die "needs at least 2 CPUs"
((CONNS >= 2 && CONNS % 2 == 0)) || die "CONNS must be even (half to each cluster)"
export PATH="$PATH:/usr/sbin:/sbin"
for tool in curl taskset haproxy nginx wrk openssl /usr/bin/time; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool missing (apt-get install haproxy nginx-light wrk openssl curl)"
done

BIN_GIVEN=${BIN:+1}
if [[ ${PROFILE:-0} == 1 ]]; then
  command -v perf >/dev/null 2>&1 || die "PROFILE=1 needs perf (apt-get install linux-perf)"
fi
build_appliance
REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$ROOT" diff --quiet HEAD -- appliance 2>/dev/null || REV="$REV with uncommitted changes"
# BIN given (another build): REV says which, or the report names the binary.
if [[ -n $BIN_GIVEN ]]; then REV=${REV_OF_BIN:-"$BIN"}; fi
BUSY_AT_START=$(busy_pct)
NOISE_MAX=$(noise_count "wrk|curl")
if ((NOISE_MAX > 0 || BUSY_AT_START > 10)); then
  log "warning: $NOISE_MAX build/test/load processes running, machine ${BUSY_AT_START}% busy; numbers will be noisy"
fi

trap bench_cleanup EXIT
trap 'exit 130' INT TERM
BENCH_TMP=$(mktemp -d /tmp/okd-sharedbench.XXXXXX)
W=$BENCH_TMP
chmod 755 "$W" # nginx's workers read the docroot

# --- topology ---------------------------------------------------------------------------------
bench_netns_with_resolv "$SRV_NS"
bench_netns_with_resolv "$CLI_NS"
bench_netns_add "$OKD_NS"
bench_netns_add "$TEST_NS"
bench_veth "$SRV_NS" "sc$$" "$SHARED/24" "$CLI_NS" "cc$$" "$CLI_IP/24"
# The clusters' interfaces (network.interface) are the services namespace's ends.
bench_veth "$SRV_NS" "bokd$$" "$OKD_APP/24" "$OKD_NS" "eth0" "$OKD_M0/24"
bench_veth "$SRV_NS" "btst$$" "$TEST_APP/24" "$TEST_NS" "eth0" "$TEST_M0/24"
ip -n "$CLI_NS" route add 10.96.1.0/24 via "$SHARED"
ip -n "$CLI_NS" route add 10.96.2.0/24 via "$SHARED"
# The client's names: to the shared frontend, or (okd-own) to each cluster's appliance_ip.
# `ip netns exec` bind-mounts /etc/netns/NS/hosts over /etc/hosts for what it starts.
set_hosts() {
  if [[ $1 == own ]]; then
    printf '127.0.0.1 localhost\n%s %s\n%s %s\n' "$OKD_APP" "$OKD_NAME" "$TEST_APP" "$TEST_NAME"
  else
    printf '127.0.0.1 localhost\n%s %s %s\n' "$SHARED" "$OKD_NAME" "$TEST_NAME"
  fi >"/etc/netns/$CLI_NS/hosts"
}

# --- backends: nginx with TLS, one per cluster's master-0 ----------------------------------
mkdir -p "$W/www" "$W/artifacts"
head -c 1024 /dev/urandom >"$W/www/small.bin"
chmod -R a+rX "$W/www"
start_backend() { # NAME NS IP
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj "/CN=*.apps.$1.$DOMAIN" -keyout "$W/$1.key" -out "$W/$1.crt" >/dev/null 2>&1 || die "openssl req for $1"
  chmod 644 "$W/$1.key"
  cat >"$W/nginx-$1.conf" <<NGINX
worker_processes 1;
daemon off;
pid $W/nginx-$1.pid;
error_log $W/nginx-$1.log;
events { worker_connections 4096; }
http {
  access_log off;
  sendfile on;
  types { application/octet-stream bin; }
  ssl_certificate $W/$1.crt;
  ssl_certificate_key $W/$1.key;
  ssl_session_cache off;
  ssl_session_tickets off;
  server {
    listen $3:443 ssl; listen $3:6443 ssl; listen $3:22623 ssl; listen $3:80;
    root $W/www;
  }
}
NGINX
  ip netns exec "$2" taskset -c $LOAD_CPU nginx -c "$W/nginx-$1.conf" &
  bench_track $!
  wait_until 10 ip netns exec "$2" curl -sfk -o /dev/null "https://$3/small.bin" || die "backend $1 ($W/nginx-$1.log)"
}
start_backend okd "$OKD_NS" "$OKD_M0"
start_backend test "$TEST_NS" "$TEST_M0"

# --- okd-appliance: two compact clusters, host files with and without shared_frontend --------
for c in okd:$OKD_APP:bokd$$:11 test:$TEST_APP:btst$$:12; do
  IFS=: read -r name app ifc mac <<<"$c"
  net=${app%.1}
  mkdir -p "$W/$name-install"
  for role in bootstrap master worker; do
    printf '{"ignition":{"version":"3.2.0"}}\n' >"$W/$name-install/$role.ign"
  done
  cat >"$W/$name.yml" <<EOF
version: 1
cluster: { name: $name, base_domain: $DOMAIN }
network:
  interface: $ifc
  subnet: $net.0/24
  gateway: $net.254
  appliance_ip: $app
nodes:
  - { name: master-0, role: master, mac: "52:54:00:96:$mac:02", ip: $net.2 }
  - { name: master-1, role: master, mac: "52:54:00:96:$mac:03", ip: $net.3 }
  - { name: master-2, role: master, mac: "52:54:00:96:$mac:04", ip: $net.4 }
install: { ignition_dir: ./$name-install, artifacts_dir: ./artifacts }
lb: { health: { interval: 200ms, timeout: 150ms, rise: 2, fall: 2, control_plane_check: tcp, ingress_check: tcp } }
EOF
done
cat >"$W/host-shared.yml" <<EOF
version: 1
state_dir: ./state-shared
shared_frontend: { address: $SHARED, default_cluster: okd }
clusters:
  - okd.yml
  - { file: test.yml, id: test }
EOF
cat >"$W/host-own.yml" <<EOF
version: 1
state_dir: ./state-own
clusters:
  - okd.yml
  - { file: test.yml, id: test }
EOF
for h in shared own; do
  (cd "$W" && "$BIN" check "host-$h.yml") >"$W/check-$h.log" 2>&1 || die "check host-$h.yml: $(tail -n 30 "$W/check-$h.log")"
done

# --- HAProxy: SNI routing on the shared frontend -------------------------------------------
haproxy_cfg() { # CONFIG
  local conf=$1 c p srv
  cat <<EOF
global
    maxconn 6000
    nbthread $(matrix_opt nbthread "$conf")
EOF
  [[ $(matrix_opt maxaccept "$conf") == default ]] || echo "    tune.maxaccept $(matrix_opt maxaccept "$conf")"
  cat <<EOF

defaults
    mode tcp
EOF
  [[ $(matrix_opt splice-auto "$conf") == on ]] && echo "    option splice-auto"
  [[ $(matrix_opt tcp-smart-connect "$conf") == on ]] && echo "    option tcp-smart-connect"
  cat <<EOF
    option redispatch
    retries 3
    timeout connect 5s
    timeout client 1h
    timeout server 1h
    timeout check 150ms

frontend api
    bind $SHARED:6443
    tcp-request inspect-delay 5s
    tcp-request content accept if { req_ssl_hello_type 1 }
    use_backend api-okd if { req_ssl_sni -i api.okd.$DOMAIN api-int.okd.$DOMAIN }
    use_backend api-test if { req_ssl_sni -i api.test.$DOMAIN api-int.test.$DOMAIN }
    default_backend api-okd

frontend machine-config
    bind $SHARED:22623
    tcp-request inspect-delay 5s
    tcp-request content accept if { req_ssl_hello_type 1 }
    use_backend machine-config-okd if { req_ssl_sni -i api-int.okd.$DOMAIN }
    use_backend machine-config-test if { req_ssl_sni -i api-int.test.$DOMAIN }
    default_backend machine-config-okd

frontend ingress-https
    bind $SHARED:443
    tcp-request inspect-delay 5s
    tcp-request content accept if { req_ssl_hello_type 1 }
    use_backend ingress-https-okd if { req_ssl_sni -m end .apps.okd.$DOMAIN }
    use_backend ingress-https-test if { req_ssl_sni -m end .apps.test.$DOMAIN }
    default_backend ingress-https-okd

frontend ingress-http
    mode http
    bind $SHARED:80
    use_backend ingress-http-okd if { hdr_end(host) -i .apps.okd.$DOMAIN }
    use_backend ingress-http-test if { hdr_end(host) -i .apps.test.$DOMAIN }
    default_backend ingress-http-okd
EOF
  for c in okd:10.96.1 test:10.96.2; do
    for p in api:6443 machine-config:22623 ingress-https:443 ingress-http:80; do
      echo
      echo "backend ${p%:*}-${c%:*}"
      [[ ${p%:*} == ingress-http ]] && echo "    mode http"
      echo "    balance roundrobin"
      for srv in 2 3 4; do
        echo "    server master-$((srv - 2)) ${c#*:}.$srv:${p#*:} check inter 200ms fall 2 rise 2"
      done
    done
  done
}
for s in "${!HAPROXY_CONF[@]}"; do
  haproxy_cfg "${HAPROXY_CONF[$s]}" >"$W/$s.cfg"
  haproxy -c -f "$W/$s.cfg" >"$W/$s.check" 2>&1 || die "haproxy -c rejected $s.cfg (${HAPROXY_CONF[$s]}): $(cat "$W/$s.check")"
done

# --- running a balancer -------------------------------------------------------------------
start_lb() {
  local cmd
  case $1 in
    okd-shared) cmd=("$BIN" serve host-shared.yml) ;;
    okd-own) cmd=("$BIN" serve host-own.yml) ;;
    haproxy*) cmd=(haproxy -db -f "$W/$1.cfg") ;;
  esac
  if [[ $1 == okd-own ]]; then set_hosts own; else set_hosts shared; fi
  (cd "$W" && exec ip netns exec "$SRV_NS" env NO_COLOR=1 taskset -c $SRV_CPU "${cmd[@]}") >"$W/$1.log" 2>&1 &
  LB_PID=$!
  bench_track "$LB_PID"
  # Both clusters' master-0 reached by name, a few times in a row.
  wait_until 20 bash -c "for i in 1 2 3; do for n in $OKD_NAME $TEST_NAME; do ip netns exec $CLI_NS curl -sfk -o /dev/null https://\$n/small.bin || exit 1; done; done" ||
    die "$1 did not start serving (log: $W/$1.log)"
  sleep 0.5 # the masters that are not running marked down by either balancer
  # What the balancer spends with no load: its health checks (24 servers every 200 ms), in ms
  # of CPU per second, from schedstat (ns) over IDLE_SECS.
  local n0 n1
  n0=$(tree_ns "$LB_PID")
  sleep "$IDLE_SECS"
  n1=$(tree_ns "$LB_PID")
  IDLE_MS=$(awk -v d=$((n1 - n0)) -v s="$IDLE_SECS" 'BEGIN {printf "%.2f", d / 1e6 / s}')
}

# Nanoseconds on CPU of a PID and all its descendants, every thread (schedstat).
tree_ns() {
  local p t sum=0
  for p in $(proc_tree "$1"); do
    for t in /proc/"$p"/task/*/schedstat; do
      read -r t _ <"$t" 2>/dev/null || continue
      sum=$((sum + t))
    done
  done
  echo "$sum"
}

# The router's count of connections it passed to cluster $1 on 443: okd_appliance_lb_routed_total
# of that cluster's /metrics (at its appliance_ip:8080), 0 when absent.
routed() {
  local ip=$OKD_APP
  [[ $1 == test ]] && ip=$TEST_APP
  ip netns exec "$CLI_NS" curl -sf --max-time 5 "http://$ip:8080/metrics" >"$W/metrics-$1" || die "no /metrics at $ip:8080"
  awk -v k="okd_appliance_lb_routed_total{port=\"443\",cluster=\"$1\"}" \
    'index($0, k) == 1 {v = $NF} END {print v + 0}' "$W/metrics-$1"
}

us() { awk -v v="$1" 'BEGIN {
  if (v ~ /us$/) print v + 0; else if (v ~ /ms$/) print v * 1000; else if (v ~ /s$/) print v * 1e6; else print v }'; }
# wrk_out FILE: "requests p50_us p99_us socket_errors" of one wrk --latency output.
wrk_out() {
  grep -q "Non-2xx" "$1" && die "wrk saw non-2xx answers: $(cat "$1")"
  local req p50 p99 errs
  req=$(awk '/ requests in / {print $1}' "$1")
  p50=$(us "$(awk '$1 == "50.000%" || $1 == "50%" {print $2}' "$1")")
  p99=$(us "$(awk '$1 == "99.000%" || $1 == "99%" {print $2}' "$1")")
  errs=$(awk '/Socket errors/ {gsub(/,/, ""); print $4 + $6 + $8 + $10}' "$1")
  [[ -n $req && -n $p50 && -n $p99 ]] || die "unexpected wrk output: $(cat "$1")"
  echo "$req $p50 $p99 ${errs:-0}"
}

# The load: two wrk at once, one per cluster's name. Sets RATE, CPU (us per conn), L50, L99,
# ERRS, REQ_OKD, REQ_TEST, WRK_CPU (the client's us per conn), NET (CPU less the checks').
load() {
  local a b t0 t1 ro rt e1 e2 p1 p2 q1 q2
  t0=$(proc_tree_ticks "$LB_PID")
  ip netns exec "$CLI_NS" taskset -c $LOAD_CPU /usr/bin/time -f "%U %S" -o "$W/time-okd" wrk -t1 -c$((CONNS / 2)) -d"${SECS}s" --latency \
    -H "Connection: close" "https://$OKD_NAME/small.bin" >"$W/wrk-okd.out" 2>&1 &
  a=$!
  ip netns exec "$CLI_NS" taskset -c $LOAD_CPU /usr/bin/time -f "%U %S" -o "$W/time-test" wrk -t1 -c$((CONNS / 2)) -d"${SECS}s" --latency \
    -H "Connection: close" "https://$TEST_NAME/small.bin" >"$W/wrk-test.out" 2>&1 &
  b=$!
  wait "$a" || die "wrk (okd) failed: $(cat "$W/wrk-okd.out")"
  wait "$b" || die "wrk (test) failed: $(cat "$W/wrk-test.out")"
  t1=$(proc_tree_ticks "$LB_PID")
  local out
  out=$(wrk_out "$W/wrk-okd.out")
  read -r REQ_OKD p1 q1 e1 <<<"$out"
  out=$(wrk_out "$W/wrk-test.out")
  read -r REQ_TEST p2 q2 e2 <<<"$out"
  ERRS=$((e1 + e2))
  RATE=$(awk -v a="$REQ_OKD" -v b="$REQ_TEST" -v s="$SECS" 'BEGIN {printf "%.0f", (a + b) / s}')
  CPU=$(awk -v t=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" -v n=$((REQ_OKD + REQ_TEST)) 'BEGIN {printf "%.1f", t * 1e6 / hz / n}')
  # The client's CPU (both wrk, user+system) per connection: on 2 cores, it and the backends'
  # share the load's core, which they fill.
  WRK_CPU=$(cat "$W/time-okd" "$W/time-test" | awk -v n=$((REQ_OKD + REQ_TEST)) '{t += $1 + $2} END {printf "%.0f", t * 1e6 / n}')
  # The balancer's CPU per connection without what its checks cost meanwhile.
  NET=$(awk -v c="$CPU" -v i="$IDLE_MS" -v s="$SECS" -v n=$((REQ_OKD + REQ_TEST)) 'BEGIN {printf "%.1f", c - i * 1000 * s / n}')
  L50=$(awk -v a="$p1" -v b="$p2" 'BEGIN {printf "%.0f", (a + b) / 2}')
  L99=$(awk -v a="$q1" -v b="$q2" 'BEGIN {printf "%.0f", (a + b) / 2}')
}

# LAT_SECS s of one connection at a time to the okd name: sets U50, U99 (us).
unloaded() {
  local req out
  ip netns exec "$CLI_NS" taskset -c $LOAD_CPU wrk -t1 -c1 -d"${LAT_SECS}s" --latency \
    -H "Connection: close" "https://$OKD_NAME/small.bin" >"$W/wrk-lat.out" 2>&1 || die "wrk -c1 failed: $(cat "$W/wrk-lat.out")"
  out=$(wrk_out "$W/wrk-lat.out")
  read -r req U50 U99 _ <<<"$out"
}

median() { printf '%s\n' "$@" | grep -E '^-?[0-9.]+$' | sort -g | awk '{v[NR] = $1} END {print NR ? v[int((NR + 1) / 2)] : "-"}'; }
declare -A ALL
: >"$W/matrix.tsv"
ERRS_TOTAL=0
for ((round = 1; round <= ROUNDS; round++)); do
  order=()
  for ((k = 0; k < ${#SERVERS[@]}; k++)); do order+=("${SERVERS[$(((k + round - 1) % ${#SERVERS[@]}))]}"); done
  for s in "${order[@]}"; do
    start_lb "$s"
    if [[ $s == okd-shared ]]; then
      r0o=$(routed okd)
      r0t=$(routed test)
    fi
    load
    if [[ $s == okd-shared ]]; then
      # Every request wrk sent to a name was routed to that name's cluster (wrk's count is of
      # completed requests; connections it opened and cut at the end make the counter higher).
      ro=$(($(routed okd) - r0o))
      rt=$(($(routed test) - r0t))
      ((ro >= REQ_OKD && rt >= REQ_TEST && ro < REQ_OKD + 2 * CONNS + 10 && rt < REQ_TEST + 2 * CONNS + 10)) ||
        die "the router did not route by server name: routed okd $ro (wrk sent $REQ_OKD), test $rt (wrk sent $REQ_TEST)"
      ROUTED_NOTE="okd $ro for $REQ_OKD requests, test $rt for $REQ_TEST"
    fi
    unloaded
    ERRS_TOTAL=$((ERRS_TOTAL + ERRS))
    log "round $round, $s${HAPROXY_CONF[$s]:+ (${HAPROXY_CONF[$s]})}: $RATE conn/s ($REQ_OKD okd + $REQ_TEST test), $CPU us balancer CPU per conn ($NET without its checks, which cost $IDLE_MS ms/s idle), wrk $WRK_CPU us CPU per conn, loaded p50 $L50 us p99 $L99 us, one at a time p50 $U50 us p99 $U99 us${ERRS:+, $ERRS socket errors}${ROUTED_NOTE:+; routed $ROUTED_NOTE}"
    ROUTED_NOTE=""
    for f in "rate=$RATE" "cpu=$CPU" "net=$NET" "idle=$IDLE_MS" "wrk=$WRK_CPU" "l50=$L50" "l99=$L99" "u50=$U50" "u99=$U99"; do ALL[$s,${f%=*}]+=" ${f#*=}"; done
    if [[ -n ${HAPROXY_CONF[$s]:-} ]]; then
      for f in "conn/s+=$RATE" "CPU us per conn-=$CPU" "less checks-=$NET" "idle ms/s-=$IDLE_MS" "p50 us-=$L50" "p99 us-=$L99" "c1 p50 us-=$U50" "c1 p99 us-=$U99"; do
        matrix_add "$W/matrix.tsv" haproxy "${HAPROXY_CONF[$s]}" "${f%=*}" "${f##*=}"
      done
    fi
    stop_pid "$LB_PID" 5 || true
    n=$(noise_count "curl")
    if ((n > NOISE_MAX)); then NOISE_MAX=$n; fi
  done
done
BUSY_AT_END=$(busy_pct)
declare -A MED
for s in "${SERVERS[@]}"; do
  for f in rate cpu net idle wrk l50 l99 u50 u99; do
    # shellcheck disable=SC2086
    MED[$s,$f]=$(median ${ALL[$s,$f]})
  done
done
WHYFILE=$W/why.tsv
matrix_why "$WHYFILE"
hbest() { matrix_best "$W/matrix.tsv" haproxy "$1" | cut -d' ' -f1; }
hbestconf() { matrix_best "$W/matrix.tsv" haproxy "$1" | cut -d' ' -f2-; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2fx", a / b; else print "-"}'; }

# --- profile ---------------------------------------------------------------------------------
# Where okd-appliance's CPU goes with and without the peek: samples of its threads (user and
# kernel stacks) during one more load of each, summed by binary, system call and function.
PROFILE_MD=$W/profile.md
: >"$PROFILE_MD"
if [[ ${PROFILE:-0} == 1 ]]; then
  for s in okd-shared okd-own; do
    log "profile: $s under the load"
    start_lb "$s"
    profile_start "$LB_PID" "$W/perf-$s.data" "$SECS"
    load
    profile_wait
    stop_pid "$LB_PID" 5 || true
    {
      echo "### Where okd-appliance's CPU goes: $s"
      echo
      echo "\`sudo PROFILE=1 bash bench/shared.sh\`: \`perf record -e cpu-clock -F 1999 -g\` of the balancer for ${SECS} s of the load ($RATE conn/s, $CPU us of its CPU per connection in that run). $PROFILE_HOW"
      echo
      profile_md "$W/perf-$s.data"
      echo
    } >>"$PROFILE_MD"
  done
fi

# --- report ----------------------------------------------------------------------------------
REPORT=$W/shared.md
{
  knobs=""
  [[ $ROUNDS == 5 ]] || knobs+="ROUNDS=$ROUNDS "
  [[ $SECS == 10 ]] || knobs+="SECS=$SECS "
  [[ $CONNS == 32 ]] || knobs+="CONNS=$CONNS "
  [[ $LAT_SECS == 2 ]] || knobs+="LAT_SECS=$LAT_SECS "
  [[ ${PROFILE:-0} != 1 ]] || knobs+="PROFILE=1 "
  noise="no other build, test run or load tool was running (the machine ${BUSY_AT_START}% busy before, ${BUSY_AT_END}% after)"
  if ((NOISE_MAX)); then
    noise="other builds or test runs shared the machine (up to $NOISE_MAX such processes; ${BUSY_AT_START}% busy before, ${BUSY_AT_END}% after): rates are noisy, compare the CPU per connection"
  fi
  echo "## Shared frontend (SNI routing)"
  echo
  echo "\`sudo ${knobs}bash bench/shared.sh\` ($(date -u '+%Y-%m-%d %H:%M UTC'), okd-appliance $REV, HAProxy $(haproxy -v | head -n 1 | awk '{print $3}'), wrk $(wrk -v 2>&1 | head -n 1 | awk '{print $2}'))."
  echo "Machine: $(nproc) cores ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), no KVM; $noise."
  echo "Two compact clusters (okd, test; three masters, master-0 running), each master-0 an nginx with TLS (P-256 self-signed, one worker, no session cache or tickets: every connection a full TLS 1.3 handshake) serving a 1 KiB file. The balancer on CPU $SRV_CPU (okd-appliance: one tokio worker; HAProxy \`nbthread 1\`); both nginx and the load on CPU $LOAD_CPU."
  echo "Load: two wrk at once (one thread, $((CONNS / 2)) connections each, ${SECS} s, \`Connection: close\`), one to https://$OKD_NAME/, one to https://$TEST_NAME/: each request a new connection with a full handshake and the server name, one GET, then close. *okd-shared*: a host file with \`shared_frontend\`, the router peeking each ClientHello at $SHARED:443 (checked every round: each cluster's \`okd_appliance_lb_routed_total{port=\"443\"}\`, on its appliance_ip:8080/metrics, grew by the requests sent to its name). *okd-own*: the same clusters without it, each name resolving to its cluster's own appliance_ip:443 (no peek). *haproxy*: \`mode tcp\`, \`tcp-request inspect-delay 5s\`, \`tcp-request content accept if { req_ssl_hello_type 1 }\`, \`use_backend ... if { req_ssl_sni -m end .apps.<cluster>.$DOMAIN }\` on $SHARED:443 (6443, 22623 by name, 80 by Host). All with TCP checks every 200 ms (timeout 150 ms, rise 2, fall 2) of the same 24 servers. Balancer CPU: utime+stime of its process tree over the load, per connection; *less the checks'*: minus what its health checks cost meanwhile, measured idle (schedstat over ${IDLE_SECS} s after each start, before the load). wrk CPU: both wrk processes' user+system time per connection. Loaded p50/p99: wrk's, the mean of the two processes'; c1: ${LAT_SECS} s of one connection at a time (wrk -c1)."
  echo
  echo "Medians of $ROUNDS rounds (each balancer started afresh per round, the order rotating); every round's figures are in the log lines the script prints. wrk's socket errors over all rounds: $ERRS_TOTAL."
  echo
  echo "| frontend | configuration | new TLS conn/s | balancer CPU us per conn | of it, less the checks' | idle CPU (checks) ms/s | loaded p50 us | loaded p99 us | c1 p50 us | c1 p99 us | wrk CPU us per conn |"
  echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  for s in "${SERVERS[@]}"; do
    echo "| ${s%%[0-9]*} | ${HAPROXY_CONF[$s]:--} | ${MED[$s,rate]} | ${MED[$s,cpu]} | ${MED[$s,net]} | ${MED[$s,idle]} | ${MED[$s,l50]} | ${MED[$s,l99]} | ${MED[$s,u50]} | ${MED[$s,u99]} | ${MED[$s,wrk]} |"
  done
  echo
  echo "| okd-appliance / HAProxy at its best | conn/s (higher is better) | CPU per conn (lower is better) | less the checks' | loaded p50 | loaded p99 | c1 p50 | c1 p99 |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  for s in okd-shared okd-own; do
    echo "| $s | $(ratio "${MED[$s,rate]}" "$(hbest "conn/s+")") | $(ratio "${MED[$s,cpu]}" "$(hbest "CPU us per conn-")") | $(ratio "${MED[$s,net]}" "$(hbest "less checks-")") | $(ratio "${MED[$s,l50]}" "$(hbest "p50 us-")") | $(ratio "${MED[$s,l99]}" "$(hbest "p99 us-")") | $(ratio "${MED[$s,u50]}" "$(hbest "c1 p50 us-")") | $(ratio "${MED[$s,u99]}" "$(hbest "c1 p99 us-")") |"
  done
  echo
  echo "HAProxy's best configuration per figure: conn/s $(hbestconf "conn/s+"); CPU per conn $(hbestconf "CPU us per conn-"); loaded p99 $(hbestconf "p99 us-"); c1 p50 $(hbestconf "c1 p50 us-")."
  echo "The peek's cost (okd-shared against okd-own): $(awk -v a="${MED[okd-shared,cpu]}" -v b="${MED[okd-own,cpu]}" 'BEGIN {printf "%+.1f us", a - b}') of balancer CPU per connection ($(ratio "${MED[okd-shared,cpu]}" "${MED[okd-own,cpu]}"); less the checks' $(awk -v a="${MED[okd-shared,net]}" -v b="${MED[okd-own,net]}" 'BEGIN {printf "%+.1f us", a - b}')), conn/s $(ratio "${MED[okd-shared,rate]}" "${MED[okd-own,rate]}"), c1 p50 $(awk -v a="${MED[okd-shared,u50]}" -v b="${MED[okd-own,u50]}" 'BEGIN {printf "%+d us", a - b}')."
  echo
  matrix_md "$W/matrix.tsv" "$WHYFILE"
  echo
  echo "Reading the figures: the TLS handshakes (nginx's signatures and key exchanges, wrk's) all run on CPU $LOAD_CPU, which the load fills; the balancer only relays bytes and does not fill CPU $SRV_CPU, so the rates mostly measure CPU $LOAD_CPU and come out close for every balancer: the balancer's CPU per connection is the figure that tells them apart."
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
  replace_doc_section "${DOC:-$ROOT/docs/performance.md}" "Shared frontend (SNI routing)" "$REPORT"
  log "updated ${DOC:-docs/performance.md}"
fi
