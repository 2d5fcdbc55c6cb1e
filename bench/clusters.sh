#!/usr/bin/env bash
# Several clusters: one `okd-appliance serve HOST.yml` for N clusters against N separate
# `okd-appliance serve cI.yml` processes (what a services host for N clusters runs without host
# files): how fast they are ready and how much memory they hold while idle.
#
#   sudo bash bench/clusters.sh
#   sudo COUNTS="1 5" RUNS=3 SKIP_BUILD=1 NO_DOC=1 bash bench/clusters.sh
#
# Every cluster is config/large.yml-sized (a /20, sixteen reverse zones, seven nodes, legacy
# etcd records, an install_config section) and differs from it, and from the others, only in
# what must differ on one host: cluster I (0-based) is named cI, its subnet is 10.(100+I).16.0/20
# (every 10.20. address of large.yml moves there: gateway, appliance_ip .2, nodes, upstream
# DNS, NTP, recursion and transfer ACLs, no_proxy), its MACs are 02:00:0a:<100+I in hex>:..,
# its ignition_dir is its own and its interface is `bondI`, one end of a veth pair inside the
# script's network namespace (the other end, `bpI`, is up and idle). The artifacts directory
# is shared. For each N of COUNTS the host file lists c0..c(N-1) with a state_dir of its own;
# `okd-appliance check` must accept it (and every cluster file alone) or the script stops.
#
# Each start measures the time from the first exec to the last READY=1 (one notify socket per
# process, as systemd gives each Type=notify unit its own), then, after IDLE seconds with no
# traffic, VmRSS and VmHWM from /proc: of the one process, and the sums over the N processes.
# The N processes are started at once (as N units are by systemd at boot), each from a copy of
# its cluster file with its own `state_dir:` added. The two sides alternate start by start, so
# drift on the machine hits both alike; figures are medians over RUNS starts. After the first
# start of each side, every cluster's DNS (an A query for api.cI.corp.example.net at its
# appliance_ip) and HTTP (a TCP connect to its appliance_ip:8080) are checked, so a figure is
# never that of a process that serves fewer clusters than it should.
#
# Environment knobs (defaults in brackets):
#   COUNTS ["1 5 20"] cluster counts, each at most 150
#   RUNS [7]          starts of each side per count
#   IDLE [3]          seconds idle before memory is read
#   SKIP_BUILD=1      use the existing target/release/okd-appliance
#   NO_DOC=1          don't rewrite the Several clusters section of docs/performance.md
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

COUNTS=${COUNTS:-1 5 20}
RUNS=${RUNS:-7}
IDLE=${IDLE:-3}
NS=cl$$

[[ $EUID -eq 0 ]] || die "run as root: sudo bash bench/clusters.sh"
command -v python3 >/dev/null 2>&1 || die "python3 missing"
read -r -a COUNT_LIST <<<"$COUNTS"
((${#COUNT_LIST[@]})) || die "COUNTS is empty"
MAX=0
for n in "${COUNT_LIST[@]}"; do
  if ! [[ $n =~ ^[1-9][0-9]*$ ]] || ((n > 150)); then die "COUNTS: $n is not a count from 1 to 150"; fi
  if ((n > MAX)); then MAX=$n; fi
done
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS: $RUNS is not a positive count"
[[ $IDLE =~ ^[0-9]+([.][0-9]+)?$ ]] || die "IDLE: $IDLE is not a number of seconds"
build_appliance
# The tree as it was built (the doc says which commit the figures are of).
REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$ROOT" diff --quiet HEAD -- appliance 2>/dev/null || REV="$REV with uncommitted changes"

trap bench_cleanup EXIT
trap 'exit 130' INT TERM
BENCH_TMP=$(mktemp -d /tmp/okd-clusters.XXXXXX)
W=$BENCH_TMP
# Builds and test runs of others (no extra names: '' keeps shellcheck from reading a missing $1).
NOISE_MAX=$(noise_count '')
BUSY_START=$(busy_pct)
note_noise() {
  local n
  n=$(noise_count '')
  if ((n > NOISE_MAX)); then NOISE_MAX=$n; fi
}

# One namespace; cluster I's appliance address on bondI.
bench_netns_add "$NS"
for ((i = 0; i < MAX; i++)); do
  ip -n "$NS" link add "bond$i" type veth peer name "bp$i"
  ip -n "$NS" addr add "10.$((100 + i)).16.2/20" dev "bond$i"
  ip -n "$NS" link set "bp$i" up
  ip -n "$NS" link set "bond$i" up
done

# The cluster files: cI.yml for the host files, sep/cI.yml (the same plus its own state_dir)
# for the separate processes.
mkdir -p "$W/artifacts" "$W/sep" "$W/log"
for ((i = 0; i < MAX; i++)); do
  x=$((100 + i))
  mkdir -p "$W/install/c$i" "$W/state-sep/c$i"
  for role in bootstrap master worker; do
    printf '{"ignition":{"version":"3.2.0"}}\n' >"$W/install/c$i/$role.ign"
  done
  sed -e "s#^  name: prod\$#  name: c$i#" \
    -e "s#^  interface: bond0\$#  interface: bond$i#" \
    -e "s#10\.20\.#10.$x.#g" \
    -e "s#\"02:00:0a:14:#\"02:00:0a:$(printf '%02x' "$x"):#g" \
    -e "s#ignition_dir: /srv/okd/install#ignition_dir: $W/install/c$i#" \
    -e "s#artifacts_dir: /srv/okd/artifacts#artifacts_dir: $W/artifacts#" \
    "$ROOT/config/large.yml" >"$W/c$i.yml"
  # Every change above must have happened (a large.yml edited later would otherwise give N
  # copies of one cluster, which check would refuse, or of a smaller one, which it would not).
  if ! grep -q "^  name: c$i\$" "$W/c$i.yml" || ! grep -q "^  interface: bond$i\$" "$W/c$i.yml" ||
    ! grep -q "ignition_dir: $W/install/c$i\$" "$W/c$i.yml" || grep -q '10\.20\.\|0a:14:' "$W/c$i.yml"; then
    die "config/large.yml no longer has the lines this script rewrites (see $W/c$i.yml)"
  fi
  { cat "$W/c$i.yml"; printf 'state_dir: %s/state-sep/c%d\n' "$W" "$i"; } >"$W/sep/c$i.yml"
  "$BIN" check "$W/sep/c$i.yml" >"$W/log/check-c$i.log" 2>&1 ||
    die "check of the separate-process file c$i failed: $(tail -n 20 "$W/log/check-c$i.log")"
done

# host-N.yml lists c0..c(N-1): the first by path (id = its name), the others as { file, id }.
for n in "${COUNT_LIST[@]}"; do
  mkdir -p "$W/state-host$n"
  {
    printf 'version: 1\nstate_dir: %s/state-host%d\nclusters:\n' "$W" "$n"
    printf '  - c0.yml\n'
    for ((i = 1; i < n; i++)); do printf '  - { file: c%d.yml, id: c%d }\n' "$i" "$i"; done
  } >"$W/host-$n.yml"
  "$BIN" check "$W/host-$n.yml" >"$W/log/check-host-$n.log" 2>&1 ||
    die "okd-appliance check host-$n.yml exited $?: $(tail -n 40 "$W/log/check-host-$n.log")"
done
log "check accepts every cluster file alone and host files of ${COUNTS// /, } clusters"

# measure TAG VERIFY CONFIG...: starts one `okd-appliance serve` per CONFIG at once; the time
# from the first exec to the last READY=1 in ms, then after IDLE seconds the sums over the
# processes of VmRSS, VmHWM, Pss (smaps_rollup), RssAnon, RssFile (KiB) and threads. With
# VERIFY=N (>0), then checks that clusters c0..c(N-1) answer DNS and accept HTTP connections.
# Prints "ready_ms rss hwm pss anon file threads".
measure() {
  local tag=$1 verify=$2
  shift 2
  ip netns exec "$NS" env RUST_LOG=warn NO_COLOR=1 python3 - "$BIN" "$IDLE" "$W/run" "$W/log/$tag" "$verify" "$@" <<'PY'
import os, selectors, socket, struct, subprocess, sys, time
binary, idle, rundir, logbase, verify = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
configs = sys.argv[6:]
os.makedirs(rundir, exist_ok=True)
sel = selectors.DefaultSelector()
socks = []
for i in range(len(configs)):
    path = os.path.join(rundir, f"notify{i}.sock")
    if os.path.exists(path):
        os.unlink(path)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    s.setblocking(False)
    sel.register(s, selectors.EVENT_READ, i)
    socks.append((s, path))
children = []
logs = []
def fail(why):
    tails = []
    for i, log in enumerate(logs):
        log.flush()
        with open(log.name, errors="replace") as f:
            tail = f.read()[-1500:]
        if tail:
            tails.append(f"--- {configs[i]}:\n{tail}")
    sys.stderr.write(why + "\n" + "\n".join(tails) + "\n")
    sys.exit(1)
try:
    start = time.monotonic()
    for i, config in enumerate(configs):
        log = open(f"{logbase}.{i}.log", "w")
        logs.append(log)
        env = dict(os.environ, NOTIFY_SOCKET=socks[i][1])
        children.append(subprocess.Popen([binary, "serve", config], env=env,
                                         stdout=log, stderr=subprocess.STDOUT))
    pending = set(range(len(configs)))
    deadline = start + 60
    while pending:
        if time.monotonic() > deadline:
            fail(f"not ready after 60 s: {len(pending)} of {len(configs)} processes")
        for i in pending:
            if children[i].poll() is not None:
                fail(f"serve {configs[i]} exited {children[i].returncode} before READY=1")
        for key, _ in sel.select(timeout=0.5):
            message = key.fileobj.recv(4096).decode(errors="replace")
            if "READY=1" in message.split("\n"):
                pending.discard(key.data)
    ready = (time.monotonic() - start) * 1000
    time.sleep(idle)
    rss = hwm = pss = anon = file = threads = 0
    for child in children:
        if child.poll() is not None:
            fail(f"serve exited {child.returncode} while idle")
        with open(f"/proc/{child.pid}/status") as f:
            status = dict(l.split(":", 1) for l in f.read().splitlines() if ":" in l)
        rss += int(status["VmRSS"].split()[0])
        hwm += int(status["VmHWM"].split()[0])
        anon += int(status["RssAnon"].split()[0])
        file += int(status["RssFile"].split()[0])
        threads += int(status["Threads"])
        with open(f"/proc/{child.pid}/smaps_rollup") as f:
            pss += next(int(l.split()[1]) for l in f if l.startswith("Pss:"))
    # Every cluster must be served: its DNS answers api.cI with its appliance address, its
    # HTTP port accepts a connection.
    for i in range(verify):
        ip = f"10.{100 + i}.16.2"
        name = f"api.c{i}.corp.example.net"
        qid = 0x4000 + i
        query = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
        query += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
        query += struct.pack(">HH", 1, 1)
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.settimeout(2)
        answer = None
        for _ in range(3):
            try:
                u.sendto(query, (ip, 53))
                answer = u.recv(4096)
                break
            except socket.timeout:
                pass
        u.close()
        if answer is None:
            fail(f"no DNS answer from {ip} for {name}")
        rid, flags, _, ancount = struct.unpack(">HHHH", answer[:8])
        if rid != qid or flags & 0xF != 0 or ancount < 1 or socket.inet_aton(ip) not in answer[len(query):]:
            fail(f"DNS at {ip}: no A {ip} for {name} (rcode {flags & 0xF}, {ancount} answers)")
        t = socket.create_connection((ip, 8080), timeout=2)
        t.close()
    print(f"{ready:.1f} {rss} {hwm} {pss} {anon} {file} {threads}")
finally:
    for child in children:
        if child.poll() is None:
            child.terminate()
    for child in children:
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    for s, path in socks:
        s.close()
        if os.path.exists(path):
            os.unlink(path)
PY
}

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
# col FILE COLUMN DIVISOR: the median of a column of a runs file, divided.
col() { awk -v c="$2" -v d="$3" '{print $c / d}' "$1" | median; }

: >"$W/rows.txt"
for n in "${COUNT_LIST[@]}"; do
  seps=()
  for ((i = 0; i < n; i++)); do seps+=("$W/sep/c$i.yml"); done
  log "$n cluster(s): one process vs $n processes, $RUNS starts each, memory after ${IDLE}s idle"
  : >"$W/one-$n.txt"
  : >"$W/sep-$n.txt"
  for ((r = 1; r <= RUNS; r++)); do
    verify=0
    ((r == 1)) && verify=$n
    line=$(measure "one-$n-$r" "$verify" "$W/host-$n.yml") || die "one process, $n clusters, start $r failed"
    echo "$line" >>"$W/one-$n.txt"
    read -r a b c d e f g <<<"$line"
    log "  start $r, one process: ready in $a ms; KiB: RSS $b (anon $e, file $f), peak $c, PSS $d; $g threads"
    line=$(measure "sep-$n-$r" "$verify" "${seps[@]}") || die "$n processes, start $r failed"
    echo "$line" >>"$W/sep-$n.txt"
    read -r a b c d e f g <<<"$line"
    log "  start $r, $n process(es): all ready in $a ms; KiB: RSS $b (anon $e, file $f), peak $c, PSS $d; $g threads (sums)"
    note_noise
  done
  # rows.txt: N, then for one process and for the N processes each: ready ms; RSS, peak, PSS,
  # anon, file MiB; threads (medians, column by column).
  row=$n
  for side in one sep; do
    row+=" $(col "$W/$side-$n.txt" 1 1)"
    for c in 2 3 4 5 6; do row+=" $(col "$W/$side-$n.txt" "$c" 1024)"; done
    row+=" $(col "$W/$side-$n.txt" 7 1)"
  done
  echo "$row" >>"$W/rows.txt"
done

BUSY_END=$(busy_pct)

report=$W/report.md
{
  knobs=""
  [[ $COUNTS == "1 5 20" ]] || knobs+="COUNTS=\"$COUNTS\" "
  [[ $RUNS == 7 ]] || knobs+="RUNS=$RUNS "
  [[ $IDLE == 3 ]] || knobs+="IDLE=$IDLE "
  cmd="sudo ${knobs}bash bench/clusters.sh"
  noise="no other build, test run or VM was running, the machine was ${BUSY_START}% busy before the first start and ${BUSY_END}% after the last"
  if ((NOISE_MAX)); then
    noise="other builds or test runs were running (up to $NOISE_MAX such processes between starts; the machine ${BUSY_START}% busy before the first start, ${BUSY_END}% after the last): the ready times are noisy, the memory is not"
  fi
  cat <<EOF
## Several clusters

Command: \`$cmd\`, run $(date -u '+%Y-%m-%d %H:%M UTC') on okd-appliance $REV.
Machine: $(nproc) cores ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), no KVM; $noise.
N clusters the size of config/large.yml (each its own name, /20 subnet, appliance_ip, node
addresses, MACs, ignition_dir and interface \`bondI\`, a veth in the script's namespace; every
service bound), served by one \`okd-appliance serve host.yml\` and, in the same run, by N
\`okd-appliance serve cI.yml\` processes started at once (each file with its own \`state_dir\`),
the two alternating start by start; medians of $RUNS starts each. *Ready* is exec to READY=1 on
the notify socket (for N processes: the first exec to the last READY=1). Memory is read after
${IDLE} s idle: VmRSS, VmHWM (the peak so far) and PSS (smaps_rollup: a page shared by k
processes counts 1/k in each); for N processes, sums. The *ratio* is the one process's figure
over the N processes' sum.

| N | ready, 1 process | RSS idle | peak RSS | PSS idle | ready, N processes | RSS idle, sum | peak RSS, sum | PSS idle, sum | ratio RSS | ratio PSS |
| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
EOF
  awk '{printf "| %d | %.1f ms | %.1f MiB | %.1f MiB | %.1f MiB | %.1f ms | %.1f MiB | %.1f MiB | %.1f MiB | %.2f | %.2f |\n", $1, $2, $3, $4, $5, $9, $10, $11, $12, $3 / $10, $5 / $12}' "$W/rows.txt"
  echo
  echo "What the resident memory is (medians; *anon* is RssAnon: heap and stacks; *file* is RssFile, nearly all of it the binary's own pages, which N processes share):"
  echo
  echo "| N | 1 process: anon | file | threads | N processes: anon, sum | file, sum | threads, sum |"
  echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  awk '{printf "| %d | %.1f MiB | %.1f MiB | %d | %.1f MiB | %.1f MiB | %d |\n", $1, $6, $7, $8, $13, $14, $15}' "$W/rows.txt"
  first=$(head -n 1 "$W/rows.txt")
  last=$(tail -n 1 "$W/rows.txt")
  awk -v a="$first" -v b="$last" 'BEGIN {
    split(a, x, " "); split(b, y, " "); d = y[1] - x[1]
    if (d > 0) {
      printf "\nFrom N = %d to %d, each further cluster costs the one process %.2f MiB of idle RSS (%.2f MiB anon, %.2f MiB PSS) and %.2f ms of start;", x[1], y[1], (y[3] - x[3]) / d, (y[6] - x[6]) / d, (y[5] - x[5]) / d, (y[2] - x[2]) / d
      printf " each further separate process costs %.2f MiB of RSS but %.2f MiB of PSS (%.2f MiB anon): the binary'"'"'s pages are shared.\n", (y[10] - x[10]) / d, (y[12] - x[12]) / d, (y[13] - x[13]) / d
    }
  }'
  echo
  echo "Reproduce: \`sudo bash bench/clusters.sh\` (knobs COUNTS, RUNS, IDLE; NO_DOC=1 leaves this file alone)."
} >"$report"
cat "$report"
if [[ ${NO_DOC:-0} != 1 ]]; then
  replace_doc_section "$ROOT/docs/performance.md" "Several clusters" "$report"
  log "wrote the Several clusters section of docs/performance.md"
fi
