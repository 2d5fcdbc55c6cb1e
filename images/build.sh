#!/usr/bin/env bash
# Builds the okd-appliance services VM: a Debian 12 (bookworm) UEFI disk image with systemd,
# systemd-boot and okd-appliance, as a compressed qcow2 for Proxmox (qm importdisk /
# import-from) and libvirt (virt-install --import).
#
#   sudo bash images/build.sh [--output FILE] [--binary FILE] [--size SIZE] [--mirror URL]
#                             [--security-mirror URL] [--apt-cache DIR] [--root-password-hash HASH]
#
# How: mmdebstrap --variant=minbase into a directory, mkfs.ext4 -d for the root file system,
# mkfs.vfat + mcopy for the EFI system partition, sfdisk on a plain file, dd to place the
# partitions, qemu-img convert. No loop device, no mount, no VM: it runs wherever root can
# chroot, in a container or CI too. See "The services VM image" in README.md.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)

OUTPUT=$REPO/images/out/okd-appliance.qcow2
BINARY=
SIZE=4G
MIRROR=http://deb.debian.org/debian
SECURITY_MIRROR=http://deb.debian.org/debian-security
APT_CACHE=
ROOT_PASSWORD_HASH=
SUITE=bookworm
ESP_MB=256

usage() {
	sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
	cat <<'EOF'
Options:
  --output FILE              the qcow2 to write (default images/out/okd-appliance.qcow2)
  --binary FILE              the okd-appliance binary to install (default: cargo build --release)
  --size SIZE                the disk's virtual size, e.g. 4G (default); the root file system
                             grows into a bigger disk at boot
  --mirror URL               Debian mirror (default http://deb.debian.org/debian)
  --security-mirror URL      Debian security mirror (default http://deb.debian.org/debian-security)
  --apt-cache DIR            keep the downloaded packages here between builds
  --root-password-hash HASH  root's password as a crypt(3) hash (openssl passwd -6); without it
                             root has no password (console login only: no SSH server is installed)
EOF
}

die() {
	echo "images/build.sh: $*" >&2
	exit 1
}

while (($#)); do
	case $1 in
	--output) OUTPUT=$2; shift 2 ;;
	--binary) BINARY=$2; shift 2 ;;
	--size) SIZE=$2; shift 2 ;;
	--mirror) MIRROR=$2; shift 2 ;;
	--security-mirror) SECURITY_MIRROR=$2; shift 2 ;;
	--apt-cache) APT_CACHE=$2; shift 2 ;;
	--root-password-hash) ROOT_PASSWORD_HASH=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; die "unknown argument: $1" ;;
	esac
done

[[ $(id -u) -eq 0 ]] || die "run as root (mmdebstrap and chroot need it)"
missing=()
for tool in mmdebstrap mkfs.ext4 mkfs.vfat mcopy sfdisk qemu-img; do
	command -v "$tool" >/dev/null || missing+=("$tool")
done
((${#missing[@]} == 0)) || die "missing tools: ${missing[*]} (apt-get install mmdebstrap e2fsprogs dosfstools mtools fdisk qemu-utils)"

size_mb=$(numfmt --from=iec --to-unit=1Mi "${SIZE%B}") || die "bad --size $SIZE"
# 1 MiB before the ESP (the GPT), 1 MiB after the root partition (the backup GPT).
root_mb=$((size_mb - 1 - ESP_MB - 1))
((root_mb >= 1536)) || die "--size $SIZE is too small: the root file system needs 1.5 GiB"

started=$SECONDS
phase() {
	echo "==> [$((SECONDS - started))s] $*"
}

if [[ -z $BINARY ]]; then
	phase "building okd-appliance (cargo build --release)"
	(cd "$REPO" && cargo build --release --locked -p okd-appliance)
	BINARY=${CARGO_TARGET_DIR:-$REPO/target}/release/okd-appliance
fi
[[ -x $BINARY ]] || die "$BINARY is not an executable"

mkdir -p "$(dirname "$OUTPUT")"
WORK=$(mktemp -d "$(dirname "$OUTPUT")/.build.XXXXXX")
cleanup() { rm -rf "$WORK"; }
trap cleanup EXIT
ROOT=$WORK/root
ESP=$WORK/esp

# What the appliance and the operator need on the services host, beyond minbase.
PACKAGES=(
	# boot: systemd as init, the kernel and its initrd, systemd-boot's EFI binary
	systemd-sysv udev dbus kmod linux-image-amd64 initramfs-tools zstd systemd-boot-efi
	e2fsprogs dosfstools
	# network: DHCP on the management NIC and static addresses on the cluster NIC
	# (systemd-networkd, in systemd), name resolution and time for the host itself
	systemd-resolved systemd-timesyncd iproute2 iputils-ping netbase
	# what okd-appliance uses at run time: TLS roots for `artifacts fetch`, gpgv for --key, the
	# iPXE binaries handed to PXE firmware (/usr/lib/ipxe)
	ca-certificates gpgv ipxe
	# for the operator at the console
	procps less nano
)

MMDEBSTRAP=(
	mmdebstrap --mode=root --variant=minbase --architectures=amd64
	--include="$(IFS=,; echo "${PACKAGES[*]}")"
	--aptopt='Acquire::Retries "3"'
	# What is listed and what it depends on, no more.
	--aptopt='APT::Install-Recommends "false"'
)
if [[ -n $APT_CACHE ]]; then
	mkdir -p "$APT_CACHE"
	APT_CACHE=$(cd "$APT_CACHE" && pwd)
	# shellcheck disable=SC2016 # mmdebstrap substitutes "$1" (the chroot) in hooks itself
	MMDEBSTRAP+=(
		--skip=download/empty --skip=essential/unlink
		--setup-hook='mkdir -p "$1"/var/cache/apt/archives/'
		--setup-hook="sync-in $APT_CACHE /var/cache/apt/archives/"
		--customize-hook="sync-out /var/cache/apt/archives $APT_CACHE"
	)
fi

phase "mmdebstrap $SUITE from $MIRROR"
"${MMDEBSTRAP[@]}" "$SUITE" "$ROOT" \
	"deb $MIRROR $SUITE main" \
	"deb $MIRROR $SUITE-updates main" \
	"deb $SECURITY_MIRROR $SUITE-security main"

phase "installing okd-appliance and the image's units"
install -m 0755 "$BINARY" "$ROOT/usr/bin/okd-appliance"
# Built on another system than the image's: it must run against the image's libraries.
chroot "$ROOT" /usr/bin/okd-appliance --version || die "$BINARY does not run on $SUITE"
install -m 0644 "$REPO/systemd/okd-appliance.service" "$ROOT/usr/lib/systemd/system/"
install -m 0644 "$REPO/systemd/okd-appliance.sysusers" "$ROOT/usr/lib/sysusers.d/okd-appliance.conf"
install -d "$ROOT/usr/share/doc/okd-appliance/examples"
install -m 0644 "$REPO/README.md" "$ROOT/usr/share/doc/okd-appliance/"
install -m 0644 "$REPO"/config/*.yml "$ROOT/usr/share/doc/okd-appliance/examples/"
cp -R --no-preserve=ownership "$HERE/rootfs/." "$ROOT/"
install -d "$ROOT/etc/initramfs/post-update.d" "$ROOT/etc/kernel/postrm.d"
ln -sf /usr/lib/okd-appliance/esp-sync "$ROOT/etc/initramfs/post-update.d/zz-okd-appliance-esp"
ln -sf /usr/lib/okd-appliance/esp-sync "$ROOT/etc/kernel/postrm.d/zz-okd-appliance-esp"

systemd-sysusers --root="$ROOT" || die "systemd-sysusers failed"
install -d -m 0750 -g "$(chroot "$ROOT" getent group okd-appliance | cut -d: -f3)" \
	"$ROOT/etc/okd-appliance"
systemctl --root="$ROOT" enable okd-appliance.service okd-appliance-prepare.service \
	systemd-networkd.service systemd-resolved.service systemd-timesyncd.service
# systemd-firstboot would ask for a locale, a time zone and a root password on the console of
# the first boot and wait there; the image answers those itself (C.UTF-8, UTC, below).
systemctl --root="$ROOT" mask systemd-firstboot.service
echo "LANG=C.UTF-8" >"$ROOT/etc/default/locale"
ln -sf /usr/share/zoneinfo/Etc/UTC "$ROOT/etc/localtime"

echo okd-services >"$ROOT/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tokd-services\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
	>"$ROOT/etc/hosts"
ln -sf ../run/systemd/resolve/stub-resolv.conf "$ROOT/etc/resolv.conf"
# Empty: every VM made from the image gets its own machine id (and DHCP client id) at first boot.
: >"$ROOT/etc/machine-id"
if [[ -n $ROOT_PASSWORD_HASH ]]; then
	chroot "$ROOT" usermod -p "$ROOT_PASSWORD_HASH" root
else
	chroot "$ROOT" passwd -d root >/dev/null
fi

root_uuid=$(cat /proc/sys/kernel/random/uuid)
esp_id=$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n' | tr a-f A-F)
esp_uuid="${esp_id:0:4}-${esp_id:4:4}"
cat >"$ROOT/etc/fstab" <<EOF
# <file system>     <mount point> <type> <options>                  <dump> <pass>
UUID=$root_uuid /           ext4   defaults,x-systemd.growfs  0      1
UUID=$esp_uuid      /boot/efi   vfat   umask=0077,nofail          0      2
EOF
install -d "$ROOT/boot/efi"
# console=tty0 last: /dev/console is the screen (Proxmox and virt-manager show it); the serial
# port gets the kernel's messages and a login prompt too.
echo "root=UUID=$root_uuid ro console=ttyS0,115200n8 console=tty0 quiet" >"$ROOT/etc/kernel/cmdline"

phase "EFI system partition: systemd-boot, kernel, initrd"
install -d "$ESP/EFI/BOOT" "$ESP/EFI/systemd"
install -m 0644 "$ROOT/usr/lib/systemd/boot/efi/systemd-bootx64.efi" "$ESP/EFI/BOOT/BOOTX64.EFI"
install -m 0644 "$ROOT/usr/lib/systemd/boot/efi/systemd-bootx64.efi" "$ESP/EFI/systemd/"
OKD_ROOT=$ROOT OKD_ESP=$ESP sh "$ROOT/usr/lib/okd-appliance/esp-sync"
rm -f "$WORK/esp.img"
mkfs.vfat -F 32 -n OKD-ESP -i "$esp_id" -C "$WORK/esp.img" $((ESP_MB * 1024)) >/dev/null
mcopy -s -i "$WORK/esp.img" "$ESP"/* ::/

phase "root file system (ext4, $root_mb MiB)"
# Downloaded package lists are stale by the time the image is used: apt update fetches them.
rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/*.bin
mkfs.ext4 -q -F -L okd-root -U "$root_uuid" -d "$ROOT" "$WORK/root.img" "${root_mb}M"

phase "disk: GPT, ESP at 1 MiB, root at $((1 + ESP_MB)) MiB"
truncate -s "${size_mb}M" "$WORK/disk.raw"
# Type 4f68bce3-...: "Linux root (x86-64)" of the Discoverable Partitions Specification, which
# systemd-repart matches to grow it.
sfdisk --quiet "$WORK/disk.raw" <<EOF
label: gpt
start=$((1 * 2048)), size=$((ESP_MB * 2048)), type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name="esp"
start=$(((1 + ESP_MB) * 2048)), size=$((root_mb * 2048)), type=4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709, name="root"
EOF
dd if="$WORK/esp.img" of="$WORK/disk.raw" bs=1M seek=1 conv=notrunc,sparse status=none
dd if="$WORK/root.img" of="$WORK/disk.raw" bs=1M seek=$((1 + ESP_MB)) conv=notrunc,sparse status=none

phase "qcow2 (compressed)"
qemu-img convert -c -O qcow2 "$WORK/disk.raw" "$OUTPUT.tmp"
mv "$OUTPUT.tmp" "$OUTPUT"

phase "done: $OUTPUT"
qemu-img info "$OUTPUT" | sed -n 's/^\(virtual size\|disk size\): /  \1: /p'
echo "  okd-appliance $("$BINARY" --version | cut -d' ' -f2), kernel $(ls "$ESP/okd"), built in $((SECONDS - started)) s"
