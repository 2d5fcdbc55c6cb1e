#!/usr/bin/env bash
# Runs okd-appliance on the shipped sample cluster, config/demo.yml, on loopback ports: no root
# and no cluster network needed. Ctrl-C stops it; `kill -HUP` reloads the config.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release -p okd-appliance

# What `openshift-install create ignition-configs` leaves behind, freshly dated, so the demo
# config validates. These are minimal Ignition configs, not a real cluster's.
mkdir -p target/demo/install_dir target/demo/artifacts
for role in bootstrap master worker; do
  printf '{"ignition":{"version":"3.2.0"}}\n' > "target/demo/install_dir/$role.ign"
done

target/release/okd-appliance check config/demo.yml
exec target/release/okd-appliance serve config/demo.yml
