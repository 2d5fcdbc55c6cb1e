# Helpers shared by the benchmark scripts in bench/. Source it; don't run it.
#
# Everything a script starts is registered here and torn down by `bench_cleanup` (install it
# with `trap bench_cleanup EXIT`): processes are killed by PID (TERM, then KILL), then every
# process still inside a namespace the script created (by PID, from `ip netns pids`), then the
# namespaces themselves. Nothing is ever killed by name.

BENCH_PIDS=()
BENCH_NETNS=()
BENCH_TMP=""
BENCH_KEEP_TMP=0

log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}

# Creates a network namespace with its loopback up and registers it for cleanup.
bench_netns_add() {
  ip netns add "$1"
  BENCH_NETNS+=("$1")
  ip -n "$1" link set lo up
}

# Like bench_netns_add, with a private /etc/netns/NAME/resolv.conf: `ip netns exec` bind-mounts
# it over /etc/resolv.conf, so nothing started inside can touch the host's. Removed on exit.
BENCH_NETNS_ETC=()
bench_netns_with_resolv() {
  mkdir -p "/etc/netns/$1"
  BENCH_NETNS_ETC+=("/etc/netns/$1")
  printf 'nameserver 127.0.0.1\n' >"/etc/netns/$1/resolv.conf"
  bench_netns_add "$1"
}

# A veth pair between two namespaces, both ends up:
#   bench_veth NS_A IF_A CIDR_A NS_B IF_B CIDR_B
# Returns once NS_B reaches A's address.
bench_veth() {
  command -v ping >/dev/null 2>&1 || die "ping missing (apt-get install iputils-ping): it tells when a veth pair is up"
  ip link add "$2" netns "$1" type veth peer name "$5" netns "$4"
  ip -n "$1" addr add "$3" dev "$2"
  ip -n "$4" addr add "$6" dev "$5"
  ip -n "$1" link set "$2" up
  ip -n "$4" link set "$5" up
  wait_until 10 ip netns exec "$4" ping -c 1 -W 1 "${3%/*}" || die "veth pair $2/$5 did not come up"
}

# Registers a PID to be killed on exit.
bench_track() { BENCH_PIDS+=("$1"); }

# The PID and all its descendants (by parent PID), one a line.
proc_tree() {
  local pid=$1 child
  [[ -d /proc/$pid ]] || return 0
  echo "$pid"
  for child in $(pgrep -P "$pid" 2>/dev/null); do
    proc_tree "$child"
  done
}

# "utime stime" in clock ticks of a PID and all its descendants (every thread of each process).
proc_tree_times() {
  local user=0 sys=0 pid rest
  for pid in $(proc_tree "$1"); do
    # The command name may hold spaces: everything after the last ") " is fixed-width.
    rest=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null) || continue
    # shellcheck disable=SC2086
    set -- $rest
    user=$((user + ${12}))
    sys=$((sys + ${13}))
  done
  echo "$user $sys"
}

# utime+stime in clock ticks of a PID and all its descendants.
proc_tree_ticks() {
  local user sys
  read -r user sys < <(proc_tree_times "$1")
  echo $((user + sys))
}

# Voluntary context switches (a thread going to sleep: in epoll_wait, mostly) of a PID and all
# its descendants, every thread of each.
proc_tree_sleeps() {
  local total=0 p
  for p in $(proc_tree "$1"); do
    total=$((total + $(cat /proc/"$p"/task/*/status 2>/dev/null | awk '/^voluntary_ctxt_switches/ {s += $2} END {print s + 0}')))
  done
  echo "$total"
}

# Resident KiB (VmRSS) of a PID and all its descendants.
proc_tree_rss_kb() {
  local total=0 p
  for p in $(proc_tree "$1"); do
    total=$((total + $(awk '/^VmRSS/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)))
  done
  echo "$total"
}

# random_file PATH MB: MB MiB of random bytes at PATH, synced, so the file's writeback does not
# run during the first measurement (it gave the first balancer of bench/lb.sh p99 tails).
random_file() {
  head -c $(($2 * 1024 * 1024)) /dev/urandom >"$1"
  sync "$1"
}

# True while PID exists and is not a zombie.
pid_alive() {
  local state
  state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [[ -n $state && $state != Z && $state != X ]]
}

# Stops PID and its descendants: TERM, up to $2 seconds (default 5), then KILL. Reaps it when
# it is our child. Returns 1 if anything of the tree survived.
stop_pid() {
  local pid=$1 grace=${2:-5} tree p i
  tree=$(proc_tree "$pid")
  [[ -n $tree ]] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < grace * 10; i++)); do
    local any=0
    for p in $tree; do pid_alive "$p" && any=1; done
    ((any)) || break
    sleep 0.1
  done
  for p in $tree; do
    pid_alive "$p" && kill -KILL "$p" 2>/dev/null
  done
  sleep 0.1
  wait "$pid" 2>/dev/null || true
  for p in $tree; do
    if pid_alive "$p"; then
      log "warning: PID $p survived KILL"
      return 1
    fi
  done
  return 0
}

# The script's own stdout and stderr, for the cleanup: a signal may arrive while a function
# runs with its output redirected to a file.
exec 8>&1 9>&2

bench_cleanup() {
  local rc=$? pid ns
  set +e
  exec 1>&8 2>&9
  for pid in "${BENCH_PIDS[@]}"; do
    stop_pid "$pid" 3 >/dev/null 2>&1
  done
  for ns in "${BENCH_NETNS[@]}"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do
      kill -KILL "$pid" 2>/dev/null
    done
  done
  for ns in "${BENCH_NETNS[@]}"; do
    ip netns del "$ns" 2>/dev/null
  done
  for ns in "${BENCH_NETNS_ETC[@]}"; do
    rm -rf "$ns"
  done
  if [[ -n $BENCH_TMP && -d $BENCH_TMP ]]; then
    if ((rc != 0 || BENCH_KEEP_TMP)); then
      log "work files kept in $BENCH_TMP"
    else
      rm -rf "$BENCH_TMP"
    fi
  fi
  exit "$rc"
}

# Waits up to $1 seconds for the command in the remaining arguments to succeed.
wait_until() {
  local timeout=$1 deadline
  shift
  deadline=$((SECONDS + timeout))
  while ((SECONDS < deadline)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  return 1
}

# Replaces the `## $2` section of markdown file $1 with the contents of file $3 (which starts
# with its own `## ` heading), keeping every other section. Creates the file with a
# `# Performance` title when missing; appends the section when absent.
replace_doc_section() {
  local doc=$1 heading=$2 body=$3 tmp
  if [[ ! -f $doc ]]; then
    printf '# Performance\n\n' >"$doc"
  fi
  tmp=$(mktemp "$doc.XXXXXX")
  awk -v heading="## $heading" -v body="$body" '
    function emit(  line) {
      while ((getline line < body) > 0) print line
      close(body)
      done = 1
    }
    $0 == heading { skipping = 1; emit(); next }
    skipping && /^## / { skipping = 0; print ""; }
    !skipping { print }
    END {
      if (!done) { print ""; emit() }
    }
  ' "$doc" >"$tmp"
  # Squeeze runs of blank lines left by the splice.
  cat -s "$tmp" >"$doc"
  rm -f "$tmp"
}

# Builds the release binary (unless SKIP_BUILD=1) and sets BIN to it; with BIN already set (an
# A/B of two builds), checks it and builds nothing. Works under sudo, where cargo lives in the
# invoking user's home.
build_appliance() {
  if [[ -n ${BIN:-} ]]; then
    [[ -x $BIN ]] || die "BIN=$BIN is not an executable"
    return 0
  fi
  BIN=$ROOT/target/release/okd-appliance
  if [[ ${SKIP_BUILD:-0} != 1 ]]; then
    local cargo
    cargo=$(command -v cargo || true)
    if [[ -z $cargo && -n ${SUDO_USER:-} ]]; then
      cargo=$(getent passwd "$SUDO_USER" | cut -d: -f6)/.cargo/bin/cargo
    fi
    [[ -n $cargo && -x $cargo ]] || cargo=$HOME/.cargo/bin/cargo
    [[ -x $cargo ]] || die "cargo not found (or set SKIP_BUILD=1)"
    log "building okd-appliance (release)"
    (cd "$ROOT" && timeout 1200 "$cargo" build --release -q -p okd-appliance) || die "cargo build failed"
  fi
  [[ -x $BIN ]] || die "$BIN missing"
}

# Other heavy processes skew absolute numbers (ratios less so): how many builds, test runs and
# load tools (by name; extra names as a |-separated argument) are running.
noise_count() {
  { pgrep -x "cargo|rustc|cc|cc1|ld|ld.lld|rust-lld|cmake|make${1:+|$1}" || true
    pgrep -f '^[^ ]*(qemu-system|e2e-)' || true; } 2>/dev/null | sort -u | wc -l
}

# "busy total" clock ticks of one CPU ($1: its number; empty: the whole machine) from
# /proc/stat: busy is user, nice, system, irq and softirq (softirq is where a veth pair's
# receiving end does its work).
cpu_ticks() {
  awk -v c="cpu$1" '$1 == c {print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8}' /proc/stat
}

# cpu_busy_pct "BUSY0 TOTAL0" "BUSY1 TOTAL1": the CPU's busy share between two cpu_ticks, in percent.
cpu_busy_pct() {
  local a b
  read -r -a a <<<"$1"
  read -r -a b <<<"$2"
  awk -v u=$((b[0] - a[0])) -v t=$((b[1] - a[1])) 'BEGIN {printf "%.0f", t ? u / t * 100 : 0}'
}

# The machine's CPU use over one second, in percent.
busy_pct() {
  local a
  a=$(cpu_ticks "")
  sleep 1
  cpu_busy_pct "$a" "$(cpu_ticks "")"
}

# --- profiles (PROFILE=1 in lb.sh, dhcp.sh and http.sh) ----------------------------------------
# What profile_md shows, for the text before it.
PROFILE_HOW="Shares of all samples: by binary; by system call (with what the kernel did inside it, softirq work for the other end of the veth pair included); and the user-space functions with the most samples of their own."

# profile_start PID DATA SECONDS: `perf record` of PID's threads (cpu-clock samples, since this
# VM has no PMU; user and kernel call chains) for SECONDS, in the background; profile_wait
# waits for it.
profile_start() {
  perf record -q -e cpu-clock -F 1999 -g -p "$1" -o "$2" -- sleep "$3" >"$2.log" 2>&1 &
  PROFILE_PID=$!
  PROFILE_DATA=$2
}
profile_wait() {
  wait "$PROFILE_PID" || die "perf record failed: $(cat "$PROFILE_DATA.log" 2>/dev/null)"
}

# profile_md DATA: a markdown code block with the shares of the profile DATA by binary, by
# system call (children included: the kernel's work inside each call) and the top user-space
# functions of okd-appliance and libc. perf's reports go to files first: a reader that stops
# early would kill perf with SIGPIPE.
profile_md() {
  local data=$1
  perf report -i "$data" --no-children --sort dso --stdio -g none >"$data.dso" 2>/dev/null
  perf report -i "$data" --children --sort sym --stdio -g none >"$data.calls" 2>/dev/null
  perf report -i "$data" --no-children --dsos okd-appliance,libc.so.6 --sort dso,sym \
    --stdio -g none >"$data.user" 2>/dev/null
  echo '```'
  awk '/^ +[0-9.]+%/ && n < 6 {print; n++}' "$data.dso"
  echo
  awk '/\] __x64_sys_/ && n < 12 {print; n++}' "$data.calls"
  echo
  awk '/^ +[0-9.]+%/ && n < 12 {print; n++}' "$data.user"
  echo '```'
}

# kea_config LEASES IFACE SUBNET POOL_START POOL_END RELAY ROUTER MAC=IP...: kea-dhcp4's JSON, on
# stdout, as the benchmarks run it: memfile persisting to LEASES (Kea never syncs it), one subnet
# with the pool and the reservations, 12 h leases, UDP sockets (the load comes through a relay
# at RELAY), warnings only.
kea_config() {
  local leases=$1 iface=$2 subnet=$3 start=$4 end=$5 relay=$6 router=$7 r sep=""
  shift 7
  cat <<KEA
{ "Dhcp4": {
  "interfaces-config": { "interfaces": [ "$iface" ], "dhcp-socket-type": "udp" },
  "lease-database": { "type": "memfile", "persist": true, "name": "$leases", "lfc-interval": 0 },
  "valid-lifetime": 43200, "authoritative": true,
  "subnet4": [ { "id": 1, "subnet": "$subnet", "pools": [ { "pool": "$start - $end" } ],
    "relay": { "ip-addresses": [ "$relay" ] },
    "option-data": [ { "name": "routers", "data": "$router" } ],
    "reservations": [
KEA
  for r in "$@"; do
    printf '%s      { "hw-address": "%s", "ip-address": "%s" }' "$sep" "${r%%=*}" "${r#*=}"
    sep=$',\n'
  done
  cat <<KEA
 ] } ],
  "loggers": [ { "name": "kea-dhcp4", "severity": "WARN", "output_options": [ { "output": "stdout" } ] } ]
} }
KEA
}

# nginx_conf CONF LISTEN ROOT: an nginx config at CONF (its pid and error log beside it) serving
# ROOT on LISTEN as the benchmarks run it: one worker in the foreground, sendfile, no access log,
# keep-alive without a request limit.
nginx_conf() {
  cat >"$1" <<NGINX
worker_processes 1;
daemon off;
pid ${1%.conf}.pid;
error_log ${1%.conf}.log;
events { worker_connections 4096; }
http {
  access_log off;
  sendfile on;
  keepalive_requests 1000000;
  types { application/octet-stream bin img; }
  server { listen $2; root $3; }
}
NGINX
}

# --- peer matrix: every peer at its best configuration -----------------------------------------
# A peer runs in every configuration its expert users choose between (nginx sendfile,
# tcp_nopush, open_file_cache; HAProxy splice-auto; Kea multi-threading), in the same run as
# okd-appliance, and okd-appliance is compared with the best of them per figure. A script
# records each figure with matrix_add, keeps a note per option (why it can matter) in a WHY
# file, and prints the matrix with matrix_md; matrix_check fails when a peer's best and worst
# configurations differ by more than 2x and no option that tells them apart has a note.
#
# Figures: lines "peer<TAB>configuration<TAB>figure<TAB>value" in a file. A configuration is
# "option=value option=value ...". A figure name ends in "+" when higher is better, "-" when
# lower is better (e.g. "small req/s+", "CPU us/req-").

# The median of a space-separated list of numbers, for the awk programs below.
MATRIX_MED='
    function med(list,   n, x, i, j, t) {
      n = split(list, x, " ")
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (x[j] + 0 < x[i] + 0) { t = x[i]; x[i] = x[j]; x[j] = t }
      return x[int((n + 1) / 2)]
    }'

# matrix_configs PREFIX CONFIGS ARRAY MAP: for each line of CONFIGS (a configuration), a server
# named PREFIX1, PREFIX2, ... appended to the array named ARRAY, its configuration in the
# associative array named MAP.
matrix_configs() {
  local -n servers_=$3 map_=$4
  local conf i=0
  while read -r conf; do
    [[ -n $conf ]] || continue
    i=$((i + 1))
    servers_+=("$1$i")
    map_[$1$i]=$conf
  done <<<"$2"
}

# matrix_opt OPTION CONFIG: OPTION's value in CONFIG ("option=value ..."), empty when absent.
matrix_opt() { awk -v k="$1" '{for (i = 1; i <= NF; i++) {split($i, kv, "="); if (kv[1] == k) print kv[2]}}' <<<"$2"; }

# matrix_why FILE: the associative array WHY (option -> note) of the calling script, as the
# WHY file the functions below read.
matrix_why() {
  local o
  for o in "${!WHY[@]}"; do printf '%s\t%s\n' "$o" "${WHY[$o]}"; done | sort >"$1"
}

# matrix_add FILE PEER CONFIG FIGURE VALUE
matrix_add() { printf '%s\t%s\t%s\t%s\n' "$2" "$3" "$4" "$5" >>"$1"; }

# matrix_best FILE PEER FIGURE: "value configuration" of PEER's best configuration for FIGURE
# (the median over the figure's values of that configuration: rounds repeat figures).
matrix_best() {
  awk -F'\t' -v peer="$2" -v fig="$3" "$MATRIX_MED"'
    $1 == peer && $3 == fig && $4 ~ /^[0-9.]+$/ { v[$2] = v[$2] " " $4 }
    END {
      hi = fig ~ /\+$/
      for (c in v) {
        m = med(v[c]) + 0
        if (best == "" || (hi ? m > bv : m < bv)) { best = c; bv = m }
      }
      if (best != "") print bv, best
    }' "$1"
}

# matrix_md FILE WHY: the matrix as markdown tables (one per peer: a row per configuration, the
# median of each figure, the best in bold, the spread best/worst under it), then the notes of
# the WHY file (lines "option<TAB>note"). Sets nothing; see matrix_check.
matrix_md() {
  awk -F'\t' -v whyfile="$2" "$MATRIX_MED"'
    $4 ~ /^[0-9.]+$/ {
      if (!($1 in seenp)) { seenp[$1] = 1; peers[++np] = $1 }
      if (!(($1, $2) in seenc)) { seenc[$1, $2] = 1; confs[$1, ++nc[$1]] = $2 }
      if (!(($1, $3) in seenf)) { seenf[$1, $3] = 1; figs[$1, ++nf[$1]] = $3 }
      v[$1, $2, $3] = v[$1, $2, $3] " " $4
    }
    END {
      for (p = 1; p <= np; p++) {
        P = peers[p]
        printf "%s, every configuration (medians over the rounds; the best per figure in bold):\n\n", P
        line = "| configuration |"; sep = "| --- |"
        for (f = 1; f <= nf[P]; f++) { name = figs[P, f]; sub(/[+-]$/, "", name); line = line " " name " |"; sep = sep " ---: |" }
        print line; print sep
        for (f = 1; f <= nf[P]; f++) {
          F = figs[P, f]; hi = F ~ /\+$/; b[f] = ""; w[f] = ""
          for (c = 1; c <= nc[P]; c++) {
            if (v[P, confs[P, c], F] == "") continue
            m = med(v[P, confs[P, c], F]) + 0
            if (b[f] == "" || (hi ? m > b[f] : m < b[f])) b[f] = m
            if (w[f] == "" || (hi ? m < w[f] : m > w[f])) w[f] = m
          }
        }
        for (c = 1; c <= nc[P]; c++) {
          C = confs[P, c]; line = "| " C " |"
          for (f = 1; f <= nf[P]; f++) {
            F = figs[P, f]
            if (v[P, C, F] == "") { line = line " - |"; continue }
            m = med(v[P, C, F])
            line = line ((m + 0 == b[f]) ? " **" m "** |" : " " m " |")
          }
          print line
        }
        line = "| best / worst |"
        for (f = 1; f <= nf[P]; f++) {
          hi = figs[P, f] ~ /\+$/
          if (b[f] > 0 && w[f] > 0) line = line sprintf(" %.2fx |", hi ? b[f] / w[f] : w[f] / b[f])
          else line = line " - |"
        }
        print line
        print ""
      }
      n = 0
      while ((getline l < whyfile) > 0) {
        split(l, x, "\t")
        if (!n++) print "Why an option can matter (the script refuses a spread above 2x that no note explains):\n"
        printf "- `%s`: %s\n", x[1], x[2]
      }
      if (n) print ""
    }' "$1"
}

# matrix_check FILE WHY: for every peer and figure whose best and worst configurations differ
# by more than 2x, at least one option that differs between the two must have a note in WHY;
# otherwise prints what is unexplained and returns 1.
matrix_check() {
  awk -F'\t' -v whyfile="$2" "$MATRIX_MED"'
    BEGIN { while ((getline l < whyfile) > 0) { split(l, x, "\t"); why[x[1]] = 1 } }
    $4 ~ /^[0-9.]+$/ { v[$1 SUBSEP $3 SUBSEP $2] = v[$1 SUBSEP $3 SUBSEP $2] " " $4; pf[$1 SUBSEP $3] = 1 }
    END {
      bad = 0
      for (k in pf) {
        split(k, pk, SUBSEP); hi = pk[2] ~ /\+$/; bc = ""; wc = ""
        for (kk in v) {
          split(kk, q, SUBSEP)
          if (q[1] != pk[1] || q[2] != pk[2]) continue
          m = med(v[kk]) + 0
          if (bc == "" || (hi ? m > bv : m < bv)) { bc = q[3]; bv = m }
          if (wc == "" || (hi ? m < wv : m > wv)) { wc = q[3]; wv = m }
        }
        if (bv <= 0 || wv <= 0) continue
        spread = hi ? bv / wv : wv / bv
        if (spread <= 2) continue
        nb = split(bc, bo, " "); explained = 0; differ = ""
        for (i = 1; i <= nb; i++) {
          split(bo[i], kv, "=")
          if (!index(" " wc " ", " " bo[i] " ")) { differ = differ " " kv[1]; if (kv[1] in why) explained = 1 }
        }
        if (!explained) {
          printf "%s, %s: best (%s: %s) and worst (%s: %s) differ %.2fx and no note says why (options that differ:%s)\n", pk[1], pk[2], bc, bv, wc, wv, spread, differ
          bad = 1
        }
      }
      exit bad
    }' "$1"
}
