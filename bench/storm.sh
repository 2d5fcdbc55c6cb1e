#!/usr/bin/env bash
# Boot storm: NODES machines network-booting at the same moment, against okd-appliance and
# against the pair it replaces (dnsmasq for DHCP, nginx for the files), in one run.
#
#   sudo bash bench/storm.sh                 # 40 nodes, 64 MiB rootfs
#   sudo NODES=8 ROUNDS=1 bash bench/storm.sh
#
# Each node is a network namespace with a veth on the server's bridge and its reserved MAC. At
# the start signal every node does what a PXE-booted CoreOS node does over the network, with
# unmodified clients: DHCP with busybox udhcpc (sending iPXE's user class, so the answer names
# its script; a hook of this script sets the address and keeps the boot file name), then with
# curl from its reserved address: its iPXE script, the kernel and the initramfs the script
# names, the rootfs and the ignition its kernel arguments name (what the live installer fetches). What each node fetched is
# compared with the files' sizes; a failed or short fetch counts as a failure.
#
# Both sides serve the same cluster config: okd-appliance from the YAML; dnsmasq from
# `okd-appliance render --format dnsmasq` of it (DHCP part, DNS off), with nginx serving the
# same paths from a directory holding the artifacts and each node's script and ignition as
# okd-appliance serves them (fetched once from it before the rounds), so both send the same
# bytes. nginx runs as its expert users run a file server for large files: one worker,
# `sendfile on`, `tcp_nopush on` (full packets for large bodies), `open_file_cache`.
#
# Per side and round: the time from the start signal to the last node done, the spread
# (slowest node / fastest node), failed fetches (must be 0), bytes moved and their rate, and
# the servers' peak resident memory (okd-appliance's one process; dnsmasq + nginx), and the CPU
# the servers (on their core) and the clients (on theirs) spent over the storm, which tells which
# end held it back. The link's limit is measured the same way: iperf3 over one node's veth, for
# the same duration.
#
# Topology (names carry this script's PID): ssrv<PID> holds the bridge br0 (10.96.0.1/16) and
# the servers, pinned to CPU 0; node i is sn<PID>-<i>, address 10.96.1.<i>, MAC
# 52:54:00:96:01:<i>; its clients run on CPU 1.
#
# Environment knobs (defaults in brackets):
#   NODES [40]           booting nodes (at most 250)
#   ROUNDS [2]           rounds; each runs both sides, the order alternating
#   KERNEL_MIB [12]      the kernel's size
#   INITRD_MIB [24]      the initramfs's size
#   ROOTFS_MIB [64]      the rootfs's size (a real one is about 900 MiB)
#   TIMEOUT [300]        seconds a storm may take before its stragglers count as failed
#   SKIP_BUILD=1         use the existing release binary
#   KEEP=1               keep the work directory (configs, logs, per-node results)
set -Eeuo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

NODES=${NODES:-40}
ROUNDS=${ROUNDS:-2}
KERNEL_MIB=${KERNEL_MIB:-12}
INITRD_MIB=${INITRD_MIB:-24}
ROOTFS_MIB=${ROOTFS_MIB:-64}
TIMEOUT=${TIMEOUT:-300}
BENCH_KEEP_TMP=${KEEP:-0}
SRV_NS=ssrv$$
SRV_IP=10.96.0.1
SRV_CPU=0
LOAD_CPU=1
HTTP_PORT=8080

[[ $EUID -eq 0 ]] || die "run as root: sudo bash bench/storm.sh"
((NODES >= 1 && NODES <= 250)) || die "NODES must be 1 to 250"
(($(nproc) >= 2)) || die "needs at least 2 CPUs (servers on CPU $SRV_CPU, nodes on CPU $LOAD_CPU)"
export PATH="$PATH:/usr/sbin:/sbin"
for tool in udhcpc curl dnsmasq nginx iperf3 taskset; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool missing (apt-get install udhcpc curl dnsmasq nginx-light iperf3)"
done

build_appliance
BUSY=$(busy_pct)
NOISE=$(noise_count)
if ((NOISE > 0 || BUSY > 10)); then
  log "warning: $NOISE build/test processes running, machine ${BUSY}% busy: times will be noisy"
fi

trap bench_cleanup EXIT
trap 'exit 130' INT TERM
BENCH_TMP=$(mktemp -d /tmp/okd-storm.XXXXXX)
W=$BENCH_TMP
chmod 755 "$W" # nginx's worker reads the document root below it

mac_of() { printf '52:54:00:96:01:%02x' "$1"; }
ip_of() { printf '10.96.1.%d' "$1"; }

# --- topology --------------------------------------------------------------------------------
log "server namespace $SRV_NS, $NODES node namespaces"
bench_netns_with_resolv "$SRV_NS"
ip -n "$SRV_NS" link add br0 type bridge
ip -n "$SRV_NS" addr add "$SRV_IP/16" dev br0
ip -n "$SRV_NS" link set br0 up
for ((i = 1; i <= NODES; i++)); do
  ns=sn$$-$i
  bench_netns_with_resolv "$ns"
  ip link add eth0 netns "$ns" address "$(mac_of "$i")" type veth peer name "p$i" netns "$SRV_NS"
  ip -n "$SRV_NS" link set "p$i" master br0 up
  ip -n "$ns" link set eth0 up
done

# --- the cluster and its files ---------------------------------------------------------------
C=$W/cluster
mkdir -p "$C/install_dir" "$C/artifacts"
for role in bootstrap master worker; do
  printf '{"ignition":{"version":"3.2.0"}}\n' >"$C/install_dir/$role.ign"
done
random_file "$C/artifacts/kernel" "$KERNEL_MIB"
random_file "$C/artifacts/initramfs.img" "$INITRD_MIB"
random_file "$C/artifacts/rootfs.img" "$ROOTFS_MIB"
{
  cat <<EOF
version: 1
cluster: { name: storm, base_domain: bench.example.com }
network:
  interface: br0
  subnet: 10.96.0.0/16
  gateway: $SRV_IP
  appliance_ip: $SRV_IP
install:
  ignition_dir: ./install_dir
  artifacts_dir: ./artifacts
  base_url: http://$SRV_IP:$HTTP_PORT
  install_dev: /dev/vda
listen: {dns: [], tftp: [], http: ["$SRV_IP:$HTTP_PORT"], api: [], machine_config: [], ingress_https: [], ingress_http: []}
state_dir: ./state
nodes:
EOF
  for ((i = 1; i <= NODES; i++)); do
    case $i in
      1) role=bootstrap ;;
      2 | 3 | 4) role=master ;;
      *) role=worker ;;
    esac
    printf '  - { name: node-%d, role: %s, mac: "%s", ip: %s }\n' "$i" "$role" "$(mac_of "$i")" "$(ip_of "$i")"
  done
} >"$C/okd.yml"
"$BIN" check "$C/okd.yml" >"$W/check.out" 2>&1 || {
  cat "$W/check.out" >&2
  die "okd-appliance check rejected the storm config"
}
"$BIN" render "$C/okd.yml" --format dnsmasq >"$W/dnsmasq.conf"
grep -q '^dhcp-host=' "$W/dnsmasq.conf" || die "the rendered dnsmasq config has no dhcp-host lines"
grep -q '^port=0' "$W/dnsmasq.conf" || echo port=0 >>"$W/dnsmasq.conf"
# TFTP stays off: the nodes are iPXE already (the user class), as with the appliance.
sed -i -e '/^enable-tftp/d' -e '/^tftp-root/d' "$W/dnsmasq.conf"

# The udhcpc hook: the address on the interface, the boot file name kept for the node.
cat >"$W/hook.sh" <<'EOF'
#!/bin/sh
case "$1" in
  bound | renew)
    ip addr flush dev "$interface"
    ip addr add "$ip/$mask" dev "$interface"
    printf '%s\n' "$boot_file" >"$STORM_OUT.boot"
    ;;
esac
exit 0
EOF
chmod 755 "$W/hook.sh"

# One node's boot, run in its namespace: writes OUT (`name start end fetched bytes failed`, times
# in ns) and OUT.log. Waits for the start signal file first.
cat >"$W/node.sh" <<'EOF'
#!/bin/bash
set -u
name=$1 out=$2 go=$3
while [[ ! -e $go ]]; do sleep 0.005; done
start=$(date +%s%N)
fetched=0 bytes=0 failed=0
fetch() { # URL EXPECTED_BYTES (0: any non-empty body)
  local got
  got=$(curl -sS -o /dev/null --max-time 600 -w '%{http_code} %{size_download}' "$1" 2>>"$out.log") || got="000 0"
  set -- "$1" "$2" $got
  if [[ $3 != 200 || $4 -eq 0 || ($2 -gt 0 && $4 -ne $2) ]]; then
    echo "failed: $1: status $3, $4 bytes (expected ${2:-any})" >>"$out.log"
    failed=$((failed + 1))
  else
    fetched=$((fetched + 1))
    bytes=$((bytes + $4))
  fi
}
export STORM_OUT=$out
if ! udhcpc -i eth0 -f -q -n -t 10 -T 1 -s "$STORM_HOOK" -x 0x4d:69505845 >>"$out.log" 2>&1; then
  echo "failed: no lease" >>"$out.log"
  echo "$name $start $(date +%s%N) 0 0 1" >"$out"
  exit 0
fi
script_url=$(cat "$out.boot")
script=$(curl -sS --max-time 60 "$script_url" 2>>"$out.log") || script=""
if [[ -z $script ]]; then
  echo "failed: script $script_url" >>"$out.log"
  failed=$((failed + 1))
else
  fetched=$((fetched + 1))
  bytes=$((bytes + ${#script}))
fi
kernel=$(awk '$1 == "kernel" { print $2; exit }' <<<"$script")
initrd=$(awk '$1 == "initrd" { print $NF; exit }' <<<"$script")
rootfs=$(grep -o 'coreos.live.rootfs_url=[^ ]*' <<<"$script" | head -n 1 | cut -d= -f2-)
ignition=$(grep -Eo '(coreos.inst.ignition_url|ignition.config.url)=[^ ]*' <<<"$script" | head -n 1 | cut -d= -f2-)
for url in "$kernel" "$initrd" "$rootfs" "$ignition"; do
  [[ -n $url ]] || { echo "failed: the script names no URL for a file" >>"$out.log"; failed=$((failed + 1)); continue; }
  case $url in
    */artifacts/kernel) fetch "$url" "$STORM_KERNEL" ;;
    */artifacts/initramfs.img) fetch "$url" "$STORM_INITRD" ;;
    */artifacts/rootfs.img) fetch "$url" "$STORM_ROOTFS" ;;
    *) fetch "$url" 0 ;;
  esac
done
echo "$name $start $(date +%s%N) $fetched $bytes $failed" >"$out"
EOF
chmod 755 "$W/node.sh"
export STORM_HOOK=$W/hook.sh
export STORM_KERNEL=$((KERNEL_MIB * 1024 * 1024))
export STORM_INITRD=$((INITRD_MIB * 1024 * 1024))
export STORM_ROOTFS=$((ROOTFS_MIB * 1024 * 1024))

# --- servers ---------------------------------------------------------------------------------
SERVER_PIDS=()
spawn() {
  local log=$1
  shift
  ip netns exec "$SRV_NS" taskset -c "$SRV_CPU" "$@" >"$log" 2>&1 &
  SERVER_PIDS+=($!)
  bench_track $!
}

http_up() { ip netns exec "$SRV_NS" curl -sf -o /dev/null "http://$SRV_IP:$HTTP_PORT/artifacts/kernel"; }
dhcp_up() { ip netns exec "$SRV_NS" ss -Hlun 'sport = :67' | grep -q .; }
iperf_up() { ip netns exec "$SRV_NS" ss -Hltn 'sport = :5201' | grep -q .; }

start_okd() {
  rm -rf "$C/state"
  spawn "$1/out.log" env RUST_LOG=warn NO_COLOR=1 "$BIN" serve "$C/okd.yml"
  wait_until 15 http_up && wait_until 15 dhcp_up || die "okd-appliance did not start: $(tail -n 20 "$1/out.log")"
}

start_peer() {
  local d=$1
  rm -f "$d/leases"
  spawn "$d/dnsmasq.log" dnsmasq --keep-in-foreground -C "$W/dnsmasq.conf" --user=root \
    --log-facility=- --pid-file="$d/dnsmasq.pid" --dhcp-leasefile="$d/leases" --quiet-dhcp
  spawn "$d/nginx.out" nginx -c "$W/nginx.conf"
  wait_until 15 http_up && wait_until 15 dhcp_up || die "dnsmasq + nginx did not start: $(tail -n 20 "$d/dnsmasq.log" "$d/nginx.out")"
}

stop_servers() {
  local pid
  for pid in "${SERVER_PIDS[@]}"; do stop_pid "$pid"; done
  SERVER_PIDS=()
}

# The peer's document root: the artifacts, and each node's script and ignition as okd-appliance
# serves them (fetched once from it, from the node's own address, which the ignition needs).
log "fetching each node's script and ignition from okd-appliance for nginx's document root"
DOCROOT=$W/www
mkdir -p "$DOCROOT/boot" "$W/prep"
ln -s "$C/artifacts" "$DOCROOT/artifacts"
start_okd "$W/prep"
for ((i = 1; i <= NODES; i++)); do
  ns=sn$$-$i
  ip -n "$ns" addr add "$(ip_of "$i")/16" dev eth0
  path=/boot/$(mac_of "$i" | tr : -).ipxe
  ip netns exec "$ns" curl -sSf -o "$DOCROOT$path" "http://$SRV_IP:$HTTP_PORT$path" || die "no script for node $i"
  ign=$(grep -Eo '(coreos.inst.ignition_url|ignition.config.url)=[^ ]*' "$DOCROOT$path" | head -n 1 | cut -d= -f2-)
  [[ -n $ign ]] || die "node $i's script names no ignition"
  ign_path=/${ign#http://*/}
  mkdir -p "$DOCROOT$(dirname "$ign_path")"
  ip netns exec "$ns" curl -sSf -o "$DOCROOT$ign_path" "$ign" || die "no ignition for node $i"
  ip -n "$ns" addr flush dev eth0
done
stop_servers
cat >"$W/nginx.conf" <<NGINX
worker_processes 1;
daemon off;
pid $W/nginx.pid;
error_log $W/nginx-error.log;
events { worker_connections 4096; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  open_file_cache max=1000 inactive=60s;
  keepalive_requests 1000000;
  default_type application/octet-stream;
  server { listen $SRV_IP:$HTTP_PORT; root $DOCROOT; }
}
NGINX

# --- one storm -------------------------------------------------------------------------------
# Busy and total clock ticks of CPU N, from /proc/stat.
cpu_ticks() {
  awk -v cpu="cpu$1" '$1 == cpu { busy = 0; for (i = 2; i <= NF; i++) if (i != 5 && i != 6) busy += $i
    total = 0; for (i = 2; i <= NF; i++) total += $i; print busy, total }' /proc/stat
}

# The servers' utime+stime, clock ticks.
server_ticks() {
  local t=0 pid
  for pid in "${SERVER_PIDS[@]}"; do t=$((t + $(proc_tree_ticks "$pid"))); done
  echo "$t"
}

# storm SIDE DIR: every node boots at once against the running servers; prints
#   side last_s spread failed bytes rate_mib_s peak_rss_mib server_cpu_pct clients_cpu_pct
# (the servers' CPU time over the storm against its wall time, one core; the clients' CPU's
# busy share over the same time): which side of the wire held the storm back.
storm() {
  local side=$1 d=$2 i pids=() peak=0 rss go=$2/go
  rm -f "$go"
  mkdir -p "$d/nodes"
  for ((i = 1; i <= NODES; i++)); do
    ip -n "sn$$-$i" addr flush dev eth0
    ip netns exec "sn$$-$i" taskset -c "$LOAD_CPU" "$W/node.sh" "node-$i" "$d/nodes/$i.done" "$go" &
    pids+=($!)
    bench_track $!
  done
  sleep 1 # every node waits on the signal
  local t0 t1 deadline=$((SECONDS + TIMEOUT)) srv0 srv1 load0 load1
  srv0=$(server_ticks)
  load0=$(cpu_ticks "$LOAD_CPU")
  t0=$(date +%s%N)
  touch "$go"
  while :; do
    rss=0
    for i in "${SERVER_PIDS[@]}"; do rss=$((rss + $(proc_tree_rss_kb "$i"))); done
    ((rss > peak)) && peak=$rss
    local running=0
    for i in "${pids[@]}"; do pid_alive "$i" && running=$((running + 1)); done
    ((running == 0)) && break
    if ((SECONDS >= deadline)); then
      log "warning: $running nodes still booting after $TIMEOUT s: counted as failed"
      for i in "${pids[@]}"; do stop_pid "$i"; done
      break
    fi
    sleep 0.1
  done
  t1=$(date +%s%N)
  srv1=$(server_ticks)
  load1=$(cpu_ticks "$LOAD_CPU")
  local hz srv_pct load_pct
  hz=$(getconf CLK_TCK)
  srv_pct=$(awk -v a="$srv0" -v b="$srv1" -v t0="$t0" -v t1="$t1" -v hz="$hz" \
    'BEGIN { printf "%.0f", (b - a) / hz / ((t1 - t0) / 1e9) * 100 }')
  load_pct=$(awk -v a="$load0" -v b="$load1" \
    'BEGIN { split(a, x, " "); split(b, y, " "); d = y[2] - x[2]; printf "%.0f", (d > 0 ? (y[1] - x[1]) / d * 100 : 0) }')
  awk -v t0="$t0" -v side="$side" -v n="$NODES" -v peak="$peak" -v srv="$srv_pct" -v load="$load_pct" '
    { if (!($1 in done)) ndone++; done[$1] = 1; d = ($3 - t0) / 1e9; if (d > last) last = d; b = ($3 - $2) / 1e9
      if (first == "" || b < first) first = b; if (b > slow) slow = b; failed += $6; bytes += $5 }
    END { failed += n - ndone
          printf "%s %.2f %.2f %d %.0f %.0f %.0f %s %s\n", side, last, (first > 0 ? slow / first : 0), failed,
                 bytes, (last > 0 ? bytes / 1048576 / last : 0), peak / 1024, srv, load }' "$d"/nodes/*.done 2>/dev/null ||
    echo "$side 0 0 $NODES 0 0 0 0 0"
}

# The link's limit over the same veth and bridge: iperf3 from node 1, as long as a storm took.
link_rate() {
  local secs=$1 d=$W/iperf
  mkdir -p "$d"
  ip -n "sn$$-1" addr flush dev eth0
  ip -n "sn$$-1" addr add "$(ip_of 1)/16" dev eth0
  spawn "$d/server.log" iperf3 -s -1 -B "$SRV_IP"
  wait_until 10 iperf_up || true
  ip netns exec "sn$$-1" taskset -c "$LOAD_CPU" iperf3 -c "$SRV_IP" -t "$secs" -J >"$d/client.json" 2>/dev/null || true
  stop_servers
  python3 -c 'import json,sys; print("%.0f" % (json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"] / 8 / 1048576))' "$d/client.json" 2>/dev/null || echo 0
}

RESULTS=$W/results.tsv
: >"$RESULTS"
for ((r = 1; r <= ROUNDS; r++)); do
  if ((r % 2)); then order=(okd-appliance peer); else order=(peer okd-appliance); fi
  for side in "${order[@]}"; do
    d=$W/r$r-$side
    mkdir -p "$d"
    case $side in
      okd-appliance) start_okd "$d" ;;
      peer) start_peer "$d" ;;
    esac
    line=$(storm "$side" "$d")
    stop_servers
    log "round $r: $line"
    echo "$r $line" >>"$RESULTS"
  done
done
LAST_MAX=$(awk '{ if ($3 > m) m = $3 } END { printf "%d", m + 1 }' "$RESULTS")
LINK=$(link_rate "$LAST_MAX")

COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
echo
echo "Boot storm, $(date -u +%Y-%m-%d), commit $COMMIT: $NODES nodes, kernel $KERNEL_MIB MiB, initramfs $INITRD_MIB MiB, rootfs $ROOTFS_MIB MiB"
echo "(machine ${BUSY}% busy and $NOISE build/test processes at the start)"
echo
printf '| round | side | last node done (s) | spread (slowest/fastest) | failed | MiB moved | MiB/s | peak RSS (MiB) | servers CPU %% (of 1 core) | clients CPU %% |\n'
printf '|---|---|---|---|---|---|---|---|---|---|\n'
awk '{ printf "| %s | %s | %s | %s | %s | %.0f | %s | %s | %s | %s |\n", $1, ($2 == "peer" ? "dnsmasq + nginx" : $2), $3, $4, $5, $6 / 1048576, $7, $8, $9, $10 }' "$RESULTS"
echo
awk -v link="$LINK" '
  { n[$2]++; last[$2] += $3; spread[$2] += $4; failed[$2] += $5; rate[$2] += $7; srv[$2] += $9; load[$2] += $10 }
  END {
    if (n["peer"] && n["okd-appliance"] && last["peer"] > 0)
      printf "Time to the last node, okd-appliance / peer: %.2fx (mean of %d rounds; <= 1.0 is the target)\n",
        (last["okd-appliance"] / n["okd-appliance"]) / (last["peer"] / n["peer"]), n["peer"]
    printf "Spread, okd-appliance: %.2f (target <= 1.2); failed fetches: okd-appliance %d, peer %d\n",
      spread["okd-appliance"] / (n["okd-appliance"] ? n["okd-appliance"] : 1), failed["okd-appliance"], failed["peer"]
    if (link > 0)
      printf "Link limit (iperf3 over the same veth and bridge): %d MiB/s; okd-appliance moved %.0f MiB/s (%.0f%% of it)\n",
        link, rate["okd-appliance"] / n["okd-appliance"], rate["okd-appliance"] / n["okd-appliance"] / link * 100
    if (n["okd-appliance"])
      printf "CPU during the storm (means): okd-appliance %.0f%% of its core, its clients %.0f%% of theirs; dnsmasq + nginx %.0f%%, their clients %.0f%%. A side whose clients are near 100%% while its server is not was held back by the clients, not the server.\n",
        srv["okd-appliance"] / n["okd-appliance"], load["okd-appliance"] / n["okd-appliance"],
        (n["peer"] ? srv["peer"] / n["peer"] : 0), (n["peer"] ? load["peer"] / n["peer"] : 0)
  }' "$RESULTS"
FAILED=$(awk '$2 == "okd-appliance" { f += $5 } END { print f + 0 }' "$RESULTS")
((FAILED == 0)) || die "okd-appliance: $FAILED failed fetches (see $W, KEEP=1 keeps it)"
