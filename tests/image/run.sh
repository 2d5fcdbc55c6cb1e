#!/usr/bin/env bash
# The services VM image, built and tested for real (as root): images/build.sh builds the qcow2,
# then the end-to-end test `image::the_services_vm_serves_the_cluster_under_systemd` boots it
# in qemu (TCG, q35, OVMF) on a tap in a bridge inside its own network namespace and checks it
# from client namespaces (udhcpc, dig, curl) and at the serial console (systemctl).
#
#   sudo bash tests/image/run.sh                 # build, then boot and test
#   sudo OKD_IMAGE=FILE bash tests/image/run.sh  # test an image built before
#
# OKD_APT_CACHE=DIR keeps the downloaded Debian packages between builds. Not part of
# tests/run.sh (CI): the build and the emulated boot take minutes (see README).
set -euo pipefail
cd "$(dirname "$0")/../.."

[[ $(id -u) -eq 0 ]] || { echo "tests/image/run.sh: run as root" >&2; exit 1; }

PACKAGES=(
  # images/build.sh
  mmdebstrap e2fsprogs dosfstools mtools fdisk qemu-utils
  # the test
  qemu-system-x86 ovmf iproute2 bind9-dnsutils curl busybox util-linux python3
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}"
fi

image=${OKD_IMAGE:-}
if [[ -z $image ]]; then
  image=images/out/okd-appliance.qcow2
  build_started=$SECONDS
  bash images/build.sh --output "$image" ${OKD_APT_CACHE:+--apt-cache "$OKD_APT_CACHE"}
  echo "image built in $((SECONDS - build_started)) s: $image"
fi
image=$(realpath "$image")

# Built before the clock starts: the figure below is the boot and the checks.
cargo build -q -p okd-appliance-e2e --tests
test_started=$SECONDS
OKD_IMAGE=$image CI=${CI:-true} cargo test -q -p okd-appliance-e2e --test e2e -- \
  --ignored --exact image::the_services_vm_serves_the_cluster_under_systemd --nocapture
echo "image test passed in $((SECONDS - test_started)) s"
