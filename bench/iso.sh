#!/usr/bin/env bash
# Per-node ISO benchmark: /iso/<node>.iso (the base ISO with the node's kernel-argument areas
# replaced) against /artifacts/live.iso (the same file served as it is, with sendfile), from
# one okd-appliance in one run. The figure is the ratio: the per-node ISO should stream at the
# plain file's speed, since everything but a few KiB goes out through the same sendfile path.
#
#   sudo bash bench/iso.sh
#
# The server runs in a namespace pinned to CPU 0, the load in another pinned to CPU 1, over a
# veth pair. The base ISO is a CoreOS-structured image (coreos/kargs.json, a padded area in
# isolinux/isolinux.cfg and EFI/fedora/grub.cfg, an empty ignition area) with a BIG_MB file of
# random bytes standing in for the rootfs, built with xorriso. For each of ROUNDS rounds,
# alternating:
#   1. whole: PARALLEL curl downloads at once (aggregate MiB/s, every size checked; one
#      download of each kind is compared with the expected bytes: the base file, or the base
#      file patched with `cmp`-counted differences inside the areas only);
#   2. ranges: one curl walking the image in RANGE_KB Range requests over one keep-alive
#      connection, as a BMC's virtual media reads it (MiB/s).
# The server's CPU time for each step (utime+stime from /proc) is printed beside the rates.
#
# Environment knobs (defaults in brackets):
#   BIG_MB [1024]  PARALLEL [8]  RANGE_KB [256]  ROUNDS [3]
#   SKIP_BUILD=1   NO_DOC=1   DOC [docs/performance.md]   KEEP=1
set -Eeuo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

BIG_MB=${BIG_MB:-1024}
PARALLEL=${PARALLEL:-8}
RANGE_KB=${RANGE_KB:-256}
ROUNDS=${ROUNDS:-3}
BENCH_KEEP_TMP=${KEEP:-0}
SRV_NS=isrv$$
CLI_NS=icli$$
SRV_IF=is$$
CLI_IF=ic$$
SRV_IP=10.95.0.1
CLI_IP=10.95.0.2
PORT=8080
SRV_CPU=0
LOAD_CPU=1
AREA=1139
KARGS="console=ttyS0,115200n8 coreos.liveiso=bench ignition.firstboot ignition.platform.id=metal"

[[ $EUID -eq 0 ]] || die "run as root: sudo bash bench/iso.sh"
(($(nproc) >= 2)) || die "needs at least 2 CPUs"
export PATH="$PATH:/usr/sbin:/sbin"
for tool in curl taskset xorriso cmp; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool missing"
done

build_appliance
BUSY_AT_START=$(busy_pct)
NOISE_MAX=$(noise_count curl)
if ((NOISE_MAX > 0 || BUSY_AT_START > 10)); then
  log "warning: $NOISE_MAX build/test/load processes running, machine ${BUSY_AT_START}% busy; numbers will be noisy"
fi

trap bench_cleanup EXIT
trap 'exit 130' INT TERM
BENCH_TMP=$(mktemp -d /tmp/okd-isobench.XXXXXX)
W=$BENCH_TMP

bench_netns_with_resolv "$SRV_NS"
bench_netns_with_resolv "$CLI_NS"
bench_veth "$SRV_NS" "$SRV_IF" "$SRV_IP/24" "$CLI_NS" "$CLI_IF" "$CLI_IP/24"

# --- the base ISO ----------------------------------------------------------------------------
area() {
  local a
  a=$(printf '%s\n' "$KARGS")
  printf '%s\n' "$KARGS"
  head -c $((AREA - ${#a} - 1)) /dev/zero | tr '\0' '#'
}
R=$W/iso-root
mkdir -p "$R/coreos" "$R/isolinux" "$R/EFI/fedora" "$R/images" "$W/artifacts" "$W/install_dir"
log "writing a ${BIG_MB} MiB rootfs stand-in and building the base ISO"
random_file "$R/images/rootfs.img" "$BIG_MB"
head -c 65536 /dev/zero >"$R/images/ignition.img"
ISOLINUX_HEAD=$'label linux\n  kernel /images/pxeboot/vmlinuz\n  append initrd=/images/pxeboot/initrd.img,/images/ignition.img '
GRUB_HEAD=$'menuentry x {\n  linux /images/pxeboot/vmlinuz '
{ printf '%s' "$ISOLINUX_HEAD"; area; printf '\n'; } >"$R/isolinux/isolinux.cfg"
{ printf '%s' "$GRUB_HEAD"; area; printf '\n}\n'; } >"$R/EFI/fedora/grub.cfg"
printf '{"default": "%s", "files": [{"path": "isolinux/isolinux.cfg", "offset": %d}, {"path": "EFI/fedora/grub.cfg", "offset": %d}], "size": %d}\n' \
  "$KARGS" "${#ISOLINUX_HEAD}" "${#GRUB_HEAD}" "$AREA" >"$R/coreos/kargs.json"
printf '{"file": "images/ignition.img"}\n' >"$R/coreos/igninfo.json"
xorriso -as mkisofs -quiet -o "$W/artifacts/live.iso" -R -J -V BENCH "$R" 2>"$W/xorriso.log" ||
  die "xorriso failed: $(cat "$W/xorriso.log")"
rm -rf "$R"
ISO_BYTES=$(stat -c %s "$W/artifacts/live.iso")
for role in bootstrap master worker; do
  printf '{"ignition":{"version":"3.2.0"}}\n' >"$W/install_dir/$role.ign"
done
cat >"$W/cluster.yml" <<EOF
version: 1
cluster: { name: bench, base_domain: okd.test }
network: { subnet: 10.95.0.0/24, appliance_ip: $SRV_IP }
nodes:
  - { name: master-0, role: master, mac: "52:54:00:00:00:02", ip: 10.95.0.10 }
install: { ignition_dir: ./install_dir, artifacts_dir: ./artifacts, base_url: "http://$SRV_IP:$PORT" }
state_dir: ./state
listen: { dns: [], dhcp: [], tftp: [], http: ["$SRV_IP:$PORT"], api: [], machine_config: [], ingress_https: [], ingress_http: [] }
EOF
"$BIN" check "$W/cluster.yml" >"$W/check.log" 2>&1 || die "check failed: $(cat "$W/check.log")"
grep -q "live ISO ok" "$W/check.log" || die "check did not accept the ISO: $(cat "$W/check.log")"
cat "$W/artifacts/live.iso" >/dev/null # page cache

(cd "$W" && exec ip netns exec "$SRV_NS" taskset -c $SRV_CPU "$BIN" serve "$W/cluster.yml") >"$W/serve.log" 2>&1 &
SERVER_PID=$!
bench_track "$SERVER_PID"
BASE=http://$SRV_IP:$PORT
wait_until 10 ip netns exec "$CLI_NS" curl -sf -o /dev/null -I "$BASE/iso/master-0.iso" ||
  die "okd-appliance did not start (log: $W/serve.log)"

# Correctness first: the base file as it is, and the node's image differing only inside the
# two areas.
ip netns exec "$CLI_NS" curl -sf -o "$W/plain.iso" "$BASE/artifacts/live.iso"
cmp -s "$W/plain.iso" "$W/artifacts/live.iso" || die "/artifacts/live.iso differs from the file"
ip netns exec "$CLI_NS" curl -sf -o "$W/node.iso" "$BASE/iso/master-0.iso"
DIFF=$(cmp -l "$W/node.iso" "$W/artifacts/live.iso" | wc -l || true)
((DIFF > 0 && DIFF <= 2 * AREA)) || die "the node ISO differs in $DIFF bytes (expected 1..$((2 * AREA)))"
rm -f "$W/plain.iso" "$W/node.iso"

server_ticks() { proc_tree_ticks "$SERVER_PID"; }

# N whole downloads of URL at once; prints seconds.
whole() {
  local url=$1 i t0 t1 pids=()
  t0=$(date +%s.%N)
  for ((i = 0; i < PARALLEL; i++)); do
    ip netns exec "$CLI_NS" taskset -c $LOAD_CPU curl -s -o /dev/null -w '%{size_download}\n' "$url" >"$W/dl.$i" &
    pids+=($!)
  done
  wait "${pids[@]}"
  t1=$(date +%s.%N)
  for ((i = 0; i < PARALLEL; i++)); do
    [[ $(cat "$W/dl.$i") == "$ISO_BYTES" ]] || die "download $i of $url got $(cat "$W/dl.$i") bytes"
  done
  awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f\n", b - a}'
}

# The whole image in RANGE_KB ranges over one connection; prints seconds.
ranges() {
  local url=$1 step=$((RANGE_KB * 1024)) at t0 t1
  for ((at = 0; at < ISO_BYTES; at += step)); do
    ((at > 0)) && echo next
    printf 'url = "%s"\noutput = "/dev/null"\nrange = "%d-%d"\n' "$url" "$at" $((at + step - 1))
  done >"$W/ranges.curl"
  t0=$(date +%s.%N)
  ip netns exec "$CLI_NS" taskset -c $LOAD_CPU curl -sf -K "$W/ranges.curl" || die "a range read of $url failed"
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f\n", b - a}'
}

mibs() { awk -v b="$1" -v s="$2" 'BEGIN {printf "%.0f", b / s / 1048576}'; }

declare -A WHOLE RANGES WTICKS RTICKS
for kind in plain node; do WHOLE[$kind]=""; RANGES[$kind]=""; WTICKS[$kind]=0; RTICKS[$kind]=0; done
for ((round = 1; round <= ROUNDS; round++)); do
  for kind in plain node; do
    url=$BASE/artifacts/live.iso
    [[ $kind == node ]] && url=$BASE/iso/master-0.iso
    t0=$(server_ticks)
    secs=$(whole "$url")
    t1=$(server_ticks)
    WHOLE[$kind]+="$(mibs $((ISO_BYTES * PARALLEL)) "$secs") "
    WTICKS[$kind]=$((WTICKS[$kind] + t1 - t0))
    t0=$(server_ticks)
    secs=$(ranges "$url")
    t1=$(server_ticks)
    RANGES[$kind]+="$(mibs "$ISO_BYTES" "$secs") "
    RTICKS[$kind]=$((RTICKS[$kind] + t1 - t0))
    log "round $round, $kind: whole ${PARALLEL}x $(echo "${WHOLE[$kind]}" | awk '{print $NF}') MiB/s, ranges $(echo "${RANGES[$kind]}" | awk '{print $NF}') MiB/s"
  done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2fx", b ? a / b : 0}'; }
W_PLAIN=$(echo "${WHOLE[plain]}" | median)
W_NODE=$(echo "${WHOLE[node]}" | median)
R_PLAIN=$(echo "${RANGES[plain]}" | median)
R_NODE=$(echo "${RANGES[node]}" | median)
HZ=$(getconf CLK_TCK)
cpu_ms() { awk -v t="$1" -v hz="$HZ" -v r="$ROUNDS" 'BEGIN {printf "%.0f", t * 1000 / hz / r}'; }

RESULT=$W/result.md
{
  echo "## Per-node ISO streaming"
  echo
  echo "\`sudo bash bench/iso.sh\` ($(date -u +%Y-%m-%d), BIG_MB=$BIG_MB, PARALLEL=$PARALLEL, RANGE_KB=$RANGE_KB, ROUNDS=$ROUNDS; a $((ISO_BYTES / 1048576)) MiB CoreOS-structured ISO; server on CPU $SRV_CPU, curl on CPU $LOAD_CPU, over a veth pair; medians of the rounds, server CPU per round)."
  echo
  echo "| what | /artifacts/live.iso (the file) | /iso/master-0.iso (patched) | ratio |"
  echo "| --- | --- | --- | --- |"
  echo "| $PARALLEL whole downloads at once | $W_PLAIN MiB/s ($(cpu_ms "${WTICKS[plain]}") ms CPU) | $W_NODE MiB/s ($(cpu_ms "${WTICKS[node]}") ms CPU) | $(ratio "$W_NODE" "$W_PLAIN") |"
  echo "| ${RANGE_KB} KiB ranges, one connection | $R_PLAIN MiB/s ($(cpu_ms "${RTICKS[plain]}") ms CPU) | $R_NODE MiB/s ($(cpu_ms "${RTICKS[node]}") ms CPU) | $(ratio "$R_NODE" "$R_PLAIN") |"
  echo
  echo "All rounds (MiB/s): whole plain ${WHOLE[plain]}/ node ${WHOLE[node]}; ranges plain ${RANGES[plain]}/ node ${RANGES[node]}."
  echo
  echo "Throughput on a shared machine varies from round to round (see all rounds, and the warning about other processes when the script prints one); the server's CPU time per round is the steadier figure."
  echo
  echo "Both paths send the file's pages with sendfile(2); the node's image adds two ${AREA}-byte areas from memory and, per request, an open and fstat of the base ISO (its parse is cached). Checked before timing: the plain download equals the file, the node's image differs from it in $DIFF bytes, all inside the two areas."
} >"$RESULT"
cat "$RESULT"
if [[ ${NO_DOC:-0} != 1 ]]; then
  replace_doc_section "${DOC:-$ROOT/docs/performance.md}" "Per-node ISO streaming" "$RESULT"
  log "updated ${DOC:-docs/performance.md}"
fi
