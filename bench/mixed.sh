#!/usr/bin/env bash
# Memory under the mixed load: okd-appliance serving DNS, DHCP, the load balancer and HTTP at
# once, against the services host it replaces under the same loads at the same time: BIND
# (`named -n 1`) for DNS, Kea (memfile) for DHCP, HAProxy (`nbthread 1`) for the balancer and
# nginx (one worker, sendfile) for the files. The figure: okd-appliance's peak resident memory
# against the peak of the four peers' resident memory added up.
#
#   sudo bash bench/mixed.sh
#
# Topology (names carry this script's PID): mxsrv<PID> holds the services (10.96.0.1/20, pinned
# to CPU 0); mxcli<PID> holds the load tools and the balancer's two backends (nginx at
# 10.96.0.21 and .22, not counted), pinned to CPU 1, over a veth pair. One side at a time:
# okd-appliance alone, then the four peers together on the same address and ports, each from
# the same cluster config (`okd-appliance render --format bind|haproxy`; Kea and nginx with the
# same pool, reservations and files). During SECS seconds, all at once:
#   DNS:  dnsperf at DNS_QPS queries/s over the authoritative names (api, *.apps, nodes, PTR);
#   DHCP: perfdhcp at DHCP_RATE 4-way exchanges/s from CLIENTS clients (a relay, giaddr .200);
#   LB:   wrk, one thread, CONNS keep-alive connections, a 4 KiB file through port 80;
#   HTTP: PARALLEL curl downloads of a BIG_MB artifact from port 8080, started again as they end.
# VmRSS of every process of each server (its whole tree) is read every 0.2 s: reported are the
# resident memory idle (after start, before the load) and the peak (the largest total seen),
# per server and for the side as a whole, and what each load got done, so both sides can be
# seen to have had the same work.
#
# Environment knobs (defaults in brackets):
#   SECS [20]  DNS_QPS [10000]  DHCP_RATE [1000]  CLIENTS [3000]  CONNS [32]  PARALLEL [4]
#   BIG_MB [256]  SKIP_BUILD=1  NO_DOC=1  DOC [docs/performance.md]  KEEP=1
set -Eeuo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

SECS=${SECS:-20}
DNS_QPS=${DNS_QPS:-10000}
DHCP_RATE=${DHCP_RATE:-1000}
CLIENTS=${CLIENTS:-3000}
CONNS=${CONNS:-32}
PARALLEL=${PARALLEL:-4}
BIG_MB=${BIG_MB:-256}
BENCH_KEEP_TMP=${KEEP:-0}
SRV_NS=mxsrv$$
CLI_NS=mxcli$$
SRV_IF=ms$$
CLI_IF=mc$$
SRV_IP=10.96.0.1
CLI_IP=10.96.0.200
BACKENDS=(10.96.0.21 10.96.0.22)
POOL_START=10.96.1.1
POOL_END=10.96.15.250
DOMAIN=okd.bench.example.com
SRV_CPU=0
LOAD_CPU=1

[[ $EUID -eq 0 ]] || die "run as root: sudo bash bench/mixed.sh"
(($(nproc) >= 2)) || die "needs at least 2 CPUs"
export PATH="$PATH:/usr/sbin:/sbin"
for pair in named:bind9 kea-dhcp4:kea-dhcp4-server haproxy:haproxy nginx:nginx-light \
  dnsperf:dnsperf perfdhcp:kea-admin wrk:wrk curl:curl; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || die "${pair%%:*} missing (apt-get install ${pair#*:})"
done

build_appliance
trap bench_cleanup EXIT
trap 'exit 130' INT TERM
BENCH_TMP=$(mktemp -d /tmp/okd-mixedbench.XXXXXX)
W=$BENCH_TMP
chmod 755 "$W" # nginx's workers read the files

# --- topology --------------------------------------------------------------------------------
bench_netns_with_resolv "$SRV_NS"
bench_netns_with_resolv "$CLI_NS"
bench_veth "$SRV_NS" "$SRV_IF" "$SRV_IP/20" "$CLI_NS" "$CLI_IF" "$CLI_IP/20"
for b in "${BACKENDS[@]}"; do ip -n "$CLI_NS" addr add "$b/20" dev "$CLI_IF"; done
in_srv() { ip netns exec "$SRV_NS" taskset -c $SRV_CPU "$@"; }
in_cli() { ip netns exec "$CLI_NS" taskset -c $LOAD_CPU "$@"; }

# --- files and the balancer's backends ---------------------------------------------------------
mkdir -p "$W/www/artifacts" "$W/backend" "$W/install_dir"
head -c 4096 /dev/urandom >"$W/backend/small.bin"
log "writing a ${BIG_MB} MiB artifact"
random_file "$W/www/artifacts/big.img" "$BIG_MB"
chmod -R a+rX "$W/www" "$W/backend"
for role in bootstrap master worker; do
  printf '{"ignition":{"version":"3.2.0"}}\n' >"$W/install_dir/$role.ign"
done
for b in "${BACKENDS[@]}"; do
  nginx_conf "$W/nginx-$b.conf" "$b:80" "$W/backend"
  in_cli nginx -c "$W/nginx-$b.conf" &
  bench_track $!
  wait_until 10 in_cli curl -sf -o /dev/null "http://$b/small.bin" || die "backend $b did not start"
done

# --- one cluster config, and the peers' configs from it ----------------------------------------
CFG=$W/cluster.yml
cat >"$CFG" <<EOF
version: 1
cluster: { name: okd, base_domain: bench.example.com }
network:
  interface: $SRV_IF
  subnet: 10.96.0.0/20
  gateway: $SRV_IP
  appliance_ip: $SRV_IP
  lease_time: 12h
  dhcp_pool: { start: $POOL_START, end: $POOL_END }
nodes:
  - { name: bootstrap, role: bootstrap, mac: "52:54:00:00:00:07", ip: 10.96.0.7 }
  - { name: master-0, role: master, mac: "52:54:00:00:00:02", ip: 10.96.0.2 }
  - { name: master-1, role: master, mac: "52:54:00:00:00:03", ip: 10.96.0.3 }
  - { name: master-2, role: master, mac: "52:54:00:00:00:04", ip: 10.96.0.4 }
  - { name: worker-0, role: worker, mac: "52:54:00:00:00:21", ip: ${BACKENDS[0]} }
  - { name: worker-1, role: worker, mac: "52:54:00:00:00:22", ip: ${BACKENDS[1]} }
install: { ignition_dir: ./install_dir, artifacts_dir: ./www/artifacts, base_url: "http://$SRV_IP:8080" }
lb: { health: { ingress_check: tcp } }
dns: { rate_limit: { responses_per_second: 0 } }
state_dir: ./state
listen: { dns: ["$SRV_IP:53"], tftp: [], http: ["$SRV_IP:8080"], api: [], machine_config: [], ingress_https: [], ingress_http: ["$SRV_IP:80"] }
EOF
"$BIN" check "$CFG" >"$W/check.out" 2>&1 || {
  cat "$W/check.out" >&2
  die "okd-appliance check rejected the benchmark config"
}
mkdir -p "$W/zones"
"$BIN" render "$CFG" --format bind -o "$W/zones" --serial 1 >/dev/null
{
  cat <<EOF
options {
  directory "$W/bind";
  pid-file "$W/bind/named.pid";
  session-keyfile "$W/bind/session.key";
  managed-keys-directory "$W/bind";
  listen-on port 53 { $SRV_IP; };
  listen-on-v6 { none; };
  dnssec-validation no;
  recursion no;
  querylog no;
};
controls { };
EOF
  for f in "$W/zones"/*.zone; do
    z=$(basename "$f" .zone)
    printf 'zone "%s" { type primary; file "%s"; };\n' "${z%.}" "$f"
  done
} >"$W/named.conf"
mkdir -p "$W/bind"
(cd "$W" && "$BIN" render --format haproxy cluster.yml) >"$W/haproxy.cfg.in" || die "render haproxy"
sed -e 's/^global$/global\n    nbthread 1/' -e 's/maxconn 20000/maxconn 6000/' \
  "$W/haproxy.cfg.in" >"$W/haproxy.cfg"
haproxy -c -f "$W/haproxy.cfg" >/dev/null || die "haproxy -c rejected the rendered config"
# Kea as bench/dhcp.sh runs it: memfile persisting, the pool, the reservations, the lease time.
kea_config "$W/kea-leases.csv" "$SRV_IF" 10.96.0.0/20 "$POOL_START" "$POOL_END" "$CLI_IP" "$SRV_IP" \
  52:54:00:00:00:07=10.96.0.7 52:54:00:00:00:02=10.96.0.2 52:54:00:00:00:03=10.96.0.3 \
  52:54:00:00:00:04=10.96.0.4 "52:54:00:00:00:21=${BACKENDS[0]}" "52:54:00:00:00:22=${BACKENDS[1]}" \
  >"$W/kea.json"
nginx_conf "$W/nginx-files.conf" "$SRV_IP:8080" "$W/www"

# The DNS queries: api and api-int, names under *.apps, the nodes, PTRs.
{
  for i in $(seq 1 200); do
    echo "api.$DOMAIN A"
    echo "api-int.$DOMAIN A"
    echo "app$i.apps.$DOMAIN A"
    echo "master-$((i % 3)).$DOMAIN A"
    echo "$((2 + i % 3)).0.96.10.in-addr.arpa PTR"
  done
} >"$W/queries.txt"

# --- the two sides -----------------------------------------------------------------------------
declare -A SERVER_PIDS
start_side() {
  SERVER_PIDS=()
  case $1 in
    okd-appliance)
      rm -rf "$W/state"
      (cd "$W" && exec ip netns exec "$SRV_NS" taskset -c $SRV_CPU env RUST_LOG=warn NO_COLOR=1 \
        "$BIN" serve "$CFG") >"$W/okd-appliance.log" 2>&1 &
      SERVER_PIDS[okd-appliance]=$!
      ;;
    peers)
      rm -f "$W/kea-leases.csv"
      in_srv named -g -n 1 -c "$W/named.conf" >"$W/named.log" 2>&1 &
      SERVER_PIDS[bind]=$!
      in_srv env KEA_LOCKFILE_DIR="$W" KEA_PIDFILE_DIR="$W" kea-dhcp4 -c "$W/kea.json" >"$W/kea.log" 2>&1 &
      SERVER_PIDS[kea]=$!
      in_srv haproxy -db -f "$W/haproxy.cfg" >"$W/haproxy.log" 2>&1 &
      SERVER_PIDS[haproxy]=$!
      in_srv nginx -c "$W/nginx-files.conf" >"$W/nginx.log" 2>&1 &
      SERVER_PIDS[nginx]=$!
      ;;
  esac
  local p
  for p in "${SERVER_PIDS[@]}"; do bench_track "$p"; done
  # Every service answers: a DNS name, a DHCP exchange, the balancer, a file.
  wait_until 15 in_cli dig +time=1 +tries=1 +short "@$SRV_IP" "api.$DOMAIN" A || die "$1: no DNS answer"
  wait_until 15 bash -c "ip netns exec $CLI_NS perfdhcp -4 -l $CLI_IF -R 1 -r 20 -p 1 -W 500000 $SRV_IP 2>&1 |
    awk '/Statistics for: REQUEST-ACK/ { ra = 1 } ra && /^received packets:/ { n = \$3 } END { exit !(n > 0) }'" ||
    die "$1: no DHCP exchange"
  wait_until 15 in_cli curl -sf -o /dev/null "http://$SRV_IP/small.bin" || die "$1: the balancer does not answer"
  wait_until 15 in_cli curl -sf -o /dev/null -r 0-0 "http://$SRV_IP:8080/artifacts/big.img" || die "$1: no file"
  sleep 2 # health checks settle
}


# Per server (okd-appliance, bind, kea, haproxy, nginx) and per side (okd-appliance, peers).
declare -A IDLE PEAK SIDE_IDLE SIDE_PEAK
# measure SIDE: idle memory, then SECS seconds of the four loads at once with memory sampled.
measure() {
  local side=$1 name sum t end
  for name in "${!SERVER_PIDS[@]}"; do IDLE[$name]=$(proc_tree_rss_kb "${SERVER_PIDS[$name]}"); PEAK[$name]=0; done
  SIDE_PEAK[$side]=0
  local loads=()
  in_cli timeout $((SECS + 15)) dnsperf -s "$SRV_IP" -d "$W/queries.txt" -l "$SECS" -Q "$DNS_QPS" \
    -c 4 -q 100 -t 2 >"$W/$side.dnsperf" 2>&1 &
  loads+=($!)
  in_cli timeout $((SECS + 15)) perfdhcp -4 -l "$CLI_IF" -r "$DHCP_RATE" -R "$CLIENTS" -p "$SECS" \
    -W 1000000 "$SRV_IP" >"$W/$side.perfdhcp" 2>&1 &
  loads+=($!)
  in_cli wrk -t1 -c"$CONNS" -d"${SECS}s" "http://$SRV_IP/small.bin" >"$W/$side.wrk" 2>&1 &
  loads+=($!)
  ip netns exec "$CLI_NS" taskset -c $LOAD_CPU bash -c "
    end=\$((SECONDS + $SECS)); n=0
    while ((SECONDS < end)); do
      for ((i = 0; i < $PARALLEL; i++)); do
        curl -s -o /dev/null -w '%{size_download}\n' --max-time $((SECS + 10)) http://$SRV_IP:8080/artifacts/big.img &
      done
      wait
    done" >"$W/$side.downloads" 2>&1 &
  loads+=($!)
  for p in "${loads[@]}"; do bench_track "$p"; done
  end=$((SECONDS + SECS))
  while ((SECONDS < end)); do
    sum=0
    for name in "${!SERVER_PIDS[@]}"; do
      t=$(proc_tree_rss_kb "${SERVER_PIDS[$name]}")
      ((t > PEAK[$name])) && PEAK[$name]=$t
      sum=$((sum + t))
    done
    ((sum > SIDE_PEAK[$side])) && SIDE_PEAK[$side]=$sum
    sleep 0.2
  done
  wait "${loads[@]}" 2>/dev/null || true
  SIDE_IDLE[$side]=0
  for name in "${!SERVER_PIDS[@]}"; do SIDE_IDLE[$side]=$((SIDE_IDLE[$side] + IDLE[$name])); done
  # What each load got done.
  WORK[$side]="DNS $(awk '/Queries completed:/ {print $3; exit}' "$W/$side.dnsperf") answers, DHCP $(awk '/Statistics for: REQUEST-ACK/ { ra = 1 } ra && /^received packets:/ { print $3; exit }' "$W/$side.perfdhcp") ACKs, LB $(awk '/requests in/ {print $1; exit}' "$W/$side.wrk") requests, HTTP $(grep -cx "$((BIG_MB * 1024 * 1024))" "$W/$side.downloads" || true) whole downloads of $BIG_MB MiB"
  for name in "${!SERVER_PIDS[@]}"; do
    pid_alive "${SERVER_PIDS[$name]}" || die "$name died under the load (see $W)"
    stop_pid "${SERVER_PIDS[$name]}" 5 || log "warning: $name did not stop cleanly"
  done
  log "$side: idle $((SIDE_IDLE[$side] / 1024)) MiB, peak $((SIDE_PEAK[$side] / 1024)) MiB; ${WORK[$side]}"
}

declare -A WORK
for side in okd-appliance peers; do
  log "$side: starting"
  start_side "$side"
  measure "$side"
done

# --- report ----------------------------------------------------------------------------------
mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }
REPORT=$W/mixed.md
{
  echo "## Memory under the mixed load"
  echo
  echo "Command: \`sudo bash bench/mixed.sh\`, run $(date -u '+%Y-%m-%d %H:%M UTC') on okd-appliance $(git -C "$ROOT" rev-parse --short HEAD)."
  echo "okd-appliance serving DNS, DHCP, the load balancer and HTTP from one cluster config, against BIND \`named -n 1\` $(named -v | awk '{print $2}'), Kea $(kea-dhcp4 -v 2>&1 | head -n 1) (memfile), HAProxy $(haproxy -v | head -n 1 | awk '{print $3}') (\`nbthread 1\`) and nginx (one worker) serving the same, one side at a time on CPU 0 at the same address, with the same loads at once for $SECS s from CPU 1: dnsperf at $DNS_QPS queries/s, perfdhcp at $DHCP_RATE exchanges/s ($CLIENTS clients), wrk with $CONNS keep-alive connections through the balancer to two nginx backends (not counted), and $PARALLEL parallel curl downloads of a $BIG_MB MiB artifact, started again as they end. Resident memory (VmRSS of every process of each server) read every 0.2 s."
  echo
  echo "| server | idle MiB | peak MiB under the load |"
  echo "| --- | ---: | ---: |"
  echo "| okd-appliance | $(mib "${SIDE_IDLE[okd-appliance]}") | $(mib "${SIDE_PEAK[okd-appliance]}") |"
  for name in bind kea haproxy nginx; do
    echo "| $name | $(mib "${IDLE[$name]}") | $(mib "${PEAK[$name]}") |"
  done
  echo "| **the four peers together** | $(mib "${SIDE_IDLE[peers]}") | $(mib "${SIDE_PEAK[peers]}") |"
  echo
  echo "Work done in the $SECS s: okd-appliance: ${WORK[okd-appliance]}; the peers: ${WORK[peers]}."
  echo
  ratio=$(awk -v a="${SIDE_PEAK[okd-appliance]}" -v b="${SIDE_PEAK[peers]}" 'BEGIN {printf "%.2f", a / b}')
  if awk -v r="$ratio" 'BEGIN {exit !(r < 1)}'; then verdict="**met**"; else verdict="**not met**"; fi
  echo "Target (performance issue): under the full mixed load, less memory than the peers' sum: okd-appliance's peak is ${ratio}× the peers' summed peak: $verdict."
} >"$REPORT"
cat "$REPORT"
if [[ ${NO_DOC:-0} != 1 ]]; then
  replace_doc_section "${DOC:-$ROOT/docs/performance.md}" "Memory under the mixed load" "$REPORT"
  log "updated ${DOC:-docs/performance.md}"
fi
