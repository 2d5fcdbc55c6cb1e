#!/usr/bin/env bash
# The per-node ISOs against coreos-installer itself, outside CI: installs coreos-installer with
# `cargo install` (about 10 minutes of build on a 2-core machine, which CI's 40-minute budget
# does not have room for), then runs the ignored tests of appliance/tests/liveiso.rs:
#  - coreos_installer_writes_the_same_bytes_as_served: /iso/<node>.iso of a CoreOS-structured
#    ISO built with xorriso is byte for byte what `coreos-installer iso kargs modify -a ...`
#    writes for the node's arguments, and `iso kargs show` on it prints them;
#  - coreos_installer_fixtures_give_the_same_bytes: the same comparison for every cosa-built
#    fixture ISO in the coreos-installer crate (kargs.json and legacy coreKarg layouts, x86_64
#    and s390x), read from cargo's registry cache where `cargo install` unpacked it.
#
# Usage: bash tests/iso/coreos-installer-check.sh    (as root, it installs the Debian packages)
# OKD_COREOS_INSTALLER_ROOT names where coreos-installer is installed (default
# ~/.cache/okd-appliance/coreos-installer); an installed one is reused.
set -euo pipefail
cd "$(dirname "$0")/../.."

packages=(libzstd-dev pkg-config xz-utils xorriso isolinux syslinux-common grub-efi-amd64-bin mtools dosfstools)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "missing packages: ${missing[*]} (run as root to install them)" >&2
    exit 1
  fi
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
    --no-install-recommends "${missing[@]}"
fi

root=${OKD_COREOS_INSTALLER_ROOT:-$HOME/.cache/okd-appliance/coreos-installer}
bin=$root/bin/coreos-installer
if [[ ! -x $bin ]]; then
  echo "installing coreos-installer into $root (cargo install, several minutes)"
  start=$SECONDS
  cargo install --locked --root "$root" coreos-installer
  echo "coreos-installer installed in $((SECONDS - start)) s"
fi
version=$("$bin" --version | awk '{print $2}')
fixtures=
for d in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/coreos-installer-"$version"/fixtures/iso; do
  [[ -d $d ]] && fixtures=$d
done
if [[ -z $fixtures ]]; then
  echo "the coreos-installer $version crate's fixtures/iso is not in cargo's registry cache" >&2
  exit 1
fi
echo "coreos-installer $version ($bin), fixtures in $fixtures"
OKD_COREOS_INSTALLER=$bin OKD_COREOS_FIXTURES=$fixtures \
  cargo test -p okd-appliance --test liveiso -- --ignored --nocapture coreos_installer
