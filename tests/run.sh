#!/usr/bin/env bash
# The whole test suite: installs the Debian packages the tests drive (when run as root), then
# formatting, lints, unit, fixture, integration and network-namespace tests.
#
# Run as root: the end-to-end tests create network namespaces. As another user they print
# "SKIPPED <test>: needs root" and pass; with CI=true a missing prerequisite fails instead.
set -euo pipefail
cd "$(dirname "$0")/.."

# Third-party peers the tests run or compare against (see ../shared/brief/testing.md).
PACKAGES=(
  iproute2 iputils-ping procps curl openssl python3 gpg gpgv
  nsd knot knot-dnssecutils knot-dnsutils bind9 bind9-utils bind9-dnsutils
  dnsmasq haproxy
  isc-dhcp-client isc-dhcp-relay dhcpcd-base busybox udhcpc kea-admin
  cmake pkg-config systemd strace
  # Boot chain in VMs (tests/e2e/boot.rs): qemu with ipxe-qemu's ROMs, OVMF, iPXE's binaries for
  # chainloading, Debian's kernel booted with the test initramfs (busybox, libc-bin's ldd).
  qemu-system-x86 ipxe-qemu ipxe ovmf linux-image-amd64 libc-bin
  # The control module's tests: sushy-emulator's venv, virsh and libvirtd (tests/e2e/libvirt.rs,
  # with QEMU's curl driver for ISOs over HTTP), virt-xml-validate's xmllint.
  python3-venv libvirt-clients libvirt-daemon-system qemu-block-extra libxml2-utils
  # libvirtd makes the domains' qcow2 volumes with qemu-img.
  qemu-utils
  # The CoreOS-structured live ISO the per-node ISO tests build (harness/liveiso.rs), and
  # qemu's curl block driver, which boots it from its URL with Range reads (e2e/iso_boot.rs).
  xorriso isolinux syslinux-common grub-efi-amd64-bin mtools dosfstools qemu-block-extra
  # The Kubernetes API double of the install orchestration's test (tests/e2e/kube_double.py)
  # makes its PKI and the kubelets' certificate requests with python3-cryptography.
  python3-cryptography
  # The stand-in openshift-install (tests/e2e/openshift_install_double.py) reads install-config.yaml.
  python3-yaml
  # The pair of appliances' test (tests/e2e/ha.rs) runs Debian's keepalived.
  keepalived
  # The libraries of NetworkManager's nm-initrd-generator, which is unpacked below, not installed.
  libglib2.0-0 libgnutls30 libudev1 libsystemd0
  # /metrics is read by the official Prometheus client's OpenMetrics parser (tests/e2e/support.rs,
  # appliance/tests/metrics.rs) and, in the text format, checked by promtool (prometheus).
  python3-prometheus-client prometheus
  # The status page in headless Chromium, driven over the DevTools protocol (tests/e2e/cdp.py).
  chromium python3-websocket
  # Redfish virtual media with sushy-emulator's libvirt driver (tests/e2e/libvirt.rs).
  python3-libvirt
)

missing_packages() {
  local p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}
# Two passes: installing one package can remove another that was already there (a fresh machine
# has a newer qemu-utils than Debian's qemu-block-extra accepts, so apt removes it), and the
# second pass puts back what the first took away.
for pass in 1 2; do
  mapfile -t missing < <(missing_packages)
  ((${#missing[@]})) || break
  if [[ $(id -u) -ne 0 ]]; then
    echo "not root: can't install ${missing[*]}; tests that need them will say SKIPPED" >&2
    break
  fi
  echo "installing (pass $pass): ${missing[*]}"
  # Packaged daemons must not start system-wide on install; the tests start their own,
  # inside network namespaces.
  created_policy=
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    created_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  if ((pass == 1)); then apt-get -o DPkg::Lock::Timeout=600 update -qq; fi
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}"
  [[ -n $created_policy ]] && rm -f /usr/sbin/policy-rc.d
done
if [[ $(id -u) -eq 0 ]]; then
  mapfile -t missing < <(missing_packages)
  if ((${#missing[@]})); then
    echo "still not installed after two passes: ${missing[*]}" >&2
    exit 1
  fi
fi

# Build from the local crate cache when the registry can't be reached (an offline machine
# whose cache already holds every crate in Cargo.lock). A machine that keeps its crates in a
# directory source instead (cargo vendor's layout) names it in OKD_CARGO_VENDOR, by default
# ~/.cargo/local-vendor; it is used only when the registry can't be reached.
CARGO_SOURCE=()
if ! cargo fetch --quiet; then
  vendor=${OKD_CARGO_VENDOR:-${CARGO_HOME:-$HOME/.cargo}/local-vendor}
  if [[ -d $vendor ]]; then
    echo "cargo fetch failed: building offline from the directory source $vendor" >&2
    CARGO_SOURCE=(--config 'source.crates-io.replace-with="okd-vendor"'
      --config "source.okd-vendor.directory=\"$vendor\"")
  else
    echo "cargo fetch failed: building offline from the local crate cache" >&2
  fi
  export CARGO_NET_OFFLINE=true
fi

# sushy-emulator (PyPI sushy-tools), the Redfish BMC the control module's tests drive, in a
# venv of its own; tests/e2e/redfish.rs finds it through OKD_SUSHY_EMULATOR.
SUSHY_VENV=${OKD_SUSHY_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/okd-appliance/sushy-venv}
if [[ ! -x $SUSHY_VENV/bin/sushy-emulator ]]; then
  python3 -m venv "$SUSHY_VENV"
  "$SUSHY_VENV/bin/pip" install --quiet "sushy-tools==2.2.0"
fi
export OKD_SUSHY_EMULATOR=$SUSHY_VENV/bin/sushy-emulator
# The same sushy-tools with its libvirt driver, which needs the libvirt bindings: Debian's
# python3-libvirt, so this venv is made by Debian's python with the system's packages.
SUSHY_LIBVIRT_VENV=${OKD_SUSHY_LIBVIRT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/okd-appliance/sushy-libvirt-venv}
if [[ ! -x $SUSHY_LIBVIRT_VENV/bin/sushy-emulator ]]; then
  /usr/bin/python3 -m venv --system-site-packages "$SUSHY_LIBVIRT_VENV"
  "$SUSHY_LIBVIRT_VENV/bin/pip" install --quiet "sushy-tools==2.2.0"
fi
export OKD_SUSHY_LIBVIRT_VENV=$SUSHY_LIBVIRT_VENV

# NetworkManager's nm-initrd-generator, which turns a node's ip= kernel arguments into the
# profile CoreOS's initramfs brings up (tests/e2e/nm_kargs.rs finds it through
# OKD_NM_INITRD_GENERATOR). Unpacked from Debian's network-manager package, never installed: an
# installed NetworkManager would start managing this machine's own interfaces and resolv.conf.
NM_DIR=${OKD_NM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/okd-appliance/network-manager}
NM_GENERATOR=$NM_DIR/usr/lib/NetworkManager/nm-initrd-generator
if [[ ! -x $NM_GENERATOR ]]; then
  deb_dir=$(mktemp -d)
  chown _apt "$deb_dir" 2>/dev/null || true # apt-get fetches as _apt where that user exists
  (cd "$deb_dir" && apt-get -o DPkg::Lock::Timeout=600 download -qq network-manager)
  mkdir -p "$NM_DIR"
  dpkg-deb -x "$deb_dir"/network-manager_*.deb "$NM_DIR"
  rm -rf "$deb_dir"
fi
export OKD_NM_INITRD_GENERATOR=$NM_GENERATOR

cargo "${CARGO_SOURCE[@]}" fmt --all -- --check
cargo "${CARGO_SOURCE[@]}" clippy --workspace --all-targets -- -D warnings
# Builds the okd-appliance binary the end-to-end tests run, then every test of the workspace.
cargo "${CARGO_SOURCE[@]}" build --workspace
cargo "${CARGO_SOURCE[@]}" test --workspace
# Every fuzz target for a bounded time (tests/fuzz/run.sh: 10 s each here, about 10 minutes
# with the instrumented build).
OKD_FUZZ_SECONDS=${OKD_FUZZ_SECONDS:-10} bash tests/fuzz/run.sh
