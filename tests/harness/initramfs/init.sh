#!/bin/sh
# /init of the okd-appliance test initramfs, built by tests/harness/initramfs.rs.
#
# It plays the CoreOS live installer and then, in the same boot, the installed system's first
# boot, against the real appliance:
#   1. an address by DHCP (busybox udhcpc, with its own event script) or the static address the
#      image was built with;
#   2. GET coreos.inst.ignition_url, as coreos-installer does; or, booted as the live system of a
#      single-node cluster (ignition.config.url, with ignition.firstboot and
#      ignition.platform.id=metal, and no coreos.inst.* argument), GET that as the live system's
#      Ignition does, then its merged config at once, and take the disk from that config's
#      install-to-disk.sh as the bootstrap-in-place install does (field mode=live);
#   3. HEAD coreos.live.rootfs_url, which the live initramfs would download (a live ISO boot,
#      with coreos.liveiso= and no rootfs URL, has its rootfs on the ISO: rootfs=live-iso);
#   4. when coreos.inst.install_dev does not exist, stop like a failed install (outcome
#      install-failed): no role config, nothing on any disk;
#   5. GET the role config the node ignition merges (ignition.config.merge[].source), as
#      Ignition does on the installed system's first boot;
#   6. write a boot sector and an "installed" marker to install_dev;
#   7. print one "okd-e2e-result:" line on the console, then reboot; after an error it powers
#      off instead, so a broken image never loops.
# Every wait is bounded. Field values never contain spaces (see clean).

PATH=/bin
export PATH
/bin/busybox --install -s /bin
mkdir -p /proc /sys /dev /tmp /run/okd-e2e
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
# Kernel messages would cut into the result line on the serial console.
echo 1 > /proc/sys/kernel/printk

. /etc/okd-e2e/config

say() { echo "okd-e2e: $*"; }
# Keeps a value on one "key=value" field: anything unusual becomes "_".
clean() { printf %s "$1" | tr -c 'A-Za-z0-9._:/@%+,-' '_'; }
fields=""
field() { fields="$fields $1=$(clean "$2")"; }
finish() {
    echo "okd-e2e-result: outcome=$1$fields"
    sync
    sleep 1
    "$2" -f
    sleep 60
}
fail() {
    field step "$1"
    field detail "$2"
    finish failed poweroff
}

cmdline=$(cat /proc/cmdline)
say "kernel command line: $cmdline"
arg() {
    for word in $cmdline; do
        case "$word" in "$1="*) echo "${word#*=}"; return 0 ;; esac
    done
    return 1
}

# The status code of the first HTTP status line wget -S (or nc) left in file $1, else 000.
status_of() {
    code=$(sed -n 's/^ *HTTP\/[0-9.]* \([0-9][0-9][0-9]\).*/\1/p' "$1" | head -n 1)
    echo "${code:-000}"
}
# GET $1 into $2; prints the status code; fails unless it is 200.
fetch() {
    timeout 30 wget -q -S -O "$2" "$1" 2>/tmp/wget.err
    ok=$?
    code=$(status_of /tmp/wget.err)
    echo "$code"
    [ "$ok" = 0 ] && [ "$code" = 200 ]
}
# HEAD $1 (http:// only); prints the status code and the length, space-separated.
head_request() {
    rest=${1#http://}
    hostport=${rest%%/*}
    path=/${rest#*/}
    [ "$rest" = "$hostport" ] && path=/
    host=${hostport%:*}
    port=${hostport##*:}
    [ "$host" = "$hostport" ] && port=80
    printf 'HEAD %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' "$path" "$hostport" |
        timeout 15 nc "$host" "$port" | tr -d '\r' > /tmp/head.out
    length=$(sed -n 's/^[Cc]ontent-[Ll]ength: *\([0-9]*\).*/\1/p' /tmp/head.out | head -n 1)
    echo "$(status_of /tmp/head.out) ${length:-none}"
}

say "test initramfs started"
while read -r module; do
    [ -n "$module" ] || continue
    insmod "/lib/modules/$module" || fail modules "insmod $module"
done < /etc/okd-e2e/modules

# The NIC appears once its driver has probed it.
iface=""
tries=0
while [ -z "$iface" ] && [ $tries -lt 100 ]; do
    for dev in /sys/class/net/*; do
        name=${dev##*/}
        [ "$name" != lo ] && [ -e "$dev" ] && iface=$name && break
    done
    [ -n "$iface" ] || { usleep 100000; tries=$((tries + 1)); }
done
[ -n "$iface" ] || fail network "no network interface"
mac=$(cat "/sys/class/net/$iface/address")
field mac "$mac"
ifconfig lo 127.0.0.1 up
ifconfig "$iface" up

if [ "$NETWORK" = dhcp ]; then
    udhcpc -i "$iface" -s /etc/okd-e2e/udhcpc.sh -f -q -n -t 10 -T 2 > /tmp/udhcpc.log 2>&1 ||
        fail dhcp "no lease on $iface"
    ip=$(cat /run/okd-e2e/ip)
    hostname=$(cat /run/okd-e2e/hostname)
else
    ifconfig "$iface" "$STATIC_IP" netmask "$STATIC_MASK" || fail network "can't set $STATIC_IP"
    ip=$STATIC_IP
    hostname=""
fi
field ip "$ip"
field hostname "$hostname"
say "$iface ($mac) has $ip${hostname:+, host name $hostname}"

# GETs the role config the node ignition merges (ignition.config.merge[].source).
fetch_role() {
    merge=$(tr -d '\n' < /tmp/node.ign | sed -n 's/.*"merge":\[\([^]]*\)\].*/\1/p' |
        sed -n 's/.*"source":"\([^"]*\)".*/\1/p')
    [ -n "$merge" ] || fail ignition "no ignition.config.merge source"
    code=$(fetch "$merge" /tmp/role.ign)
    field role "$code"
    [ "$code" = 200 ] || { field step role; finish failed poweroff; }
    field role_bytes "$(wc -c < /tmp/role.ign)"
    field role_file "${merge##*/}"
}

if ignition_url=$(arg ignition.config.url); then
    mode=live
    for inst in coreos.inst.ignition_url coreos.inst.install_dev; do
        arg "$inst" > /dev/null && fail cmdline "$inst on a live system that installs itself"
    done
    case " $cmdline " in *" ignition.firstboot "*) ;; *) fail cmdline "no ignition.firstboot" ;; esac
    [ "$(arg ignition.platform.id)" = metal ] || fail cmdline "no ignition.platform.id=metal"
else
    mode=installer
    ignition_url=$(arg coreos.inst.ignition_url) || fail cmdline "no coreos.inst.ignition_url"
    install_dev=$(arg coreos.inst.install_dev) || fail cmdline "no coreos.inst.install_dev"
fi
field mode "$mode"
rootfs_url=$(arg coreos.live.rootfs_url) || rootfs_url=""
[ -n "$rootfs_url" ] || arg coreos.liveiso > /dev/null ||
    fail cmdline "no coreos.live.rootfs_url (and no coreos.liveiso)"

code=$(fetch "$ignition_url" /tmp/node.ign)
field ignition "$code"
[ "$code" = 200 ] || { field step ignition; finish failed poweroff; }
ignition_sha=$(sha256sum /tmp/node.ign | cut -d' ' -f1)
field ignition_sha256 "$ignition_sha"
# The node's name as its ignition writes it to /etc/hostname ("data:,NAME%0A").
ignition_host=$(tr -d '\n' < /tmp/node.ign | sed -n 's/.*"data:,\([A-Za-z0-9.-]*\)%0A".*/\1/p')
field ignition_host "$ignition_host"
if [ "$mode" = live ]; then
    # The live system's Ignition merges at once; the bootstrap-in-place config's
    # install-to-disk.sh runs `coreos-installer install -n -i /opt/openshift/master.ign DISK`.
    fetch_role
    install_dev=$(sed -n 's/.*master\.ign%20\(\/dev\/[A-Za-z0-9\/_.-]*\).*/\1/p' /tmp/role.ign | head -n 1)
    [ -n "$install_dev" ] || fail role "no installation disk in the live system's config"
fi

if [ -n "$rootfs_url" ]; then
    set -- $(head_request "$rootfs_url")
    field rootfs "$1"
    field rootfs_length "$2"
    [ "$1" = 200 ] || { field step rootfs; finish failed poweroff; }
else
    field rootfs live-iso
fi

# coreos-installer fails on a device that does not exist; the node never reaches its first boot.
tries=0
while [ ! -b "$install_dev" ] && [ $tries -lt 50 ]; do
    usleep 100000
    tries=$((tries + 1))
done
if [ ! -b "$install_dev" ]; then
    field install_dev "$install_dev"
    field detail "no_such_device"
    finish install-failed reboot
fi

[ "$mode" = live ] || fetch_role

# Sector 0: a boot sector whose code prints a banner on COM1 (so a later disk boot shows on the
# serial console); sector 1: the marker the test reads back from the disk image.
banner="okd-e2e: booted from disk of ${ignition_host:-unknown}"
dd if=/dev/zero of="$install_dev" bs=512 count=2 conv=notrunc 2>/dev/null || fail disk "can't write $install_dev"
dd if=/etc/okd-e2e/bootcode of="$install_dev" bs=1 conv=notrunc 2>/dev/null
printf '%s\r\n' "$banner" | dd of="$install_dev" bs=1 seek="$BANNER_OFFSET" conv=notrunc 2>/dev/null
printf '\125\252' | dd of="$install_dev" bs=1 seek=510 conv=notrunc 2>/dev/null
printf 'okd-e2e-installed:%s\n' "$fields" | dd of="$install_dev" bs=512 seek=1 conv=notrunc 2>/dev/null
sync
field disk "$install_dev"
finish installed reboot
