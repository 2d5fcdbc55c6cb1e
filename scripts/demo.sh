#!/usr/bin/env bash
# Runs okd-appliance on the shipped sample cluster, config/demo.yml, on loopback ports: no root
# and no cluster network needed. Ctrl-C stops it; `kill -HUP` reloads the config.
#
# Everything it writes goes under cargo's target directory (CARGO_TARGET_DIR when set), in
# demo/: a copy of the config whose paths point there, the install directory, the state.
set -euo pipefail
cd "$(dirname "$0")/.."

# Where cargo puts its builds, as cargo itself says (CARGO_TARGET_DIR, a config file, or ./target).
target_dir=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
if [[ ! -x $target_dir/release/okd-appliance ]]; then
  echo "demo: building okd-appliance in release mode; a first build takes several minutes (about 15 on two cores)" >&2
fi
# The binary cargo built, by its own account (no guessing at the layout).
binary=$(cargo build --release -p okd-appliance --message-format=json-render-diagnostics |
  python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "okd-appliance":
        print(m["executable"])
')
[[ -x $binary ]] || { echo "demo: cargo named no okd-appliance binary" >&2; exit 1; }

# What `openshift-install create ignition-configs` leaves behind, freshly dated, so the demo
# config validates. These are minimal Ignition configs, not a real cluster's.
demo=$target_dir/demo
mkdir -p "$demo/install_dir" "$demo/artifacts"
for role in bootstrap master worker; do
  printf '{"ignition":{"version":"3.2.0"}}\n' > "$demo/install_dir/$role.ign"
done
# The shipped config with its directories beside the copy.
sed -e 's|\.\./target/demo/|./|' config/demo.yml > "$demo/okd.yml"

"$binary" check "$demo/okd.yml"
# The first screen's next step: what to try while it serves. The boot files are left out on
# purpose (the demo has no machines to boot), so their warnings above and below are expected.
cat >&2 <<EOF

demo: serving cluster demo.okd.test on 127.0.0.1 until Ctrl-C. From another terminal:
  dig @127.0.0.1 -p 15353 +short api.demo.okd.test             # the cluster's names
  curl -s http://127.0.0.1:18080/boot/52-54-00-00-00-02.ipxe   # master-0's iPXE script
  $binary status $demo/okd.yml   # each node's reservation, fetches and phase
demo: the boot files (kernel, initramfs, rootfs) are not fetched: the demo has no machines to
  boot. For a real cluster, the hint above names the command that fetches them, verified.

EOF
exec "$binary" serve "$demo/okd.yml"
