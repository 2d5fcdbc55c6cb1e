#!/bin/sh
# /init of the okd-appliance test initramfs, built by tests/harness/initramfs.rs.
#
# It plays the CoreOS live installer and then, in the same boot, the installed system's first
# boot, against the real appliance:
#   1. the network as NetworkManager's initramfs would set it up from the ip= arguments that
#      name this NIC (by name or MAC) or none (see read_ip_args): a static IPv6 address and
#      gateway, IPv4 by DHCP (busybox udhcpc, with its own event script) unless ip= disabled it;
#      or the static IPv4 address the image was built with;
#   2. GET coreos.inst.ignition_url, as coreos-installer does (through IGNITION_HOST instead of
#      the URL's host and port when the image was built with one, e.g. the appliance's IPv6
#      address, to show that the node is known there by its IPv6 address); or, booted as the
#      live system of a single-node cluster (ignition.config.url, with ignition.firstboot and
#      ignition.platform.id=metal, and no coreos.inst.* argument), GET that as the live system's
#      Ignition does, then its merged config at once, and take the disk from that config's
#      install-to-disk.sh as the bootstrap-in-place install does (field mode=live);
#   3. HEAD coreos.live.rootfs_url, which the live initramfs would download (a live ISO boot,
#      with coreos.liveiso= and no rootfs URL, has its rootfs on the ISO: rootfs=live-iso);
#   4. when coreos.inst.install_dev does not exist, stop like a failed install (outcome
#      install-failed): no role config, nothing on any disk;
#   5. GET the role config the node ignition merges (ignition.config.merge[].source), as
#      Ignition does on the installed system's first boot (not with FIRST_BOOT=no: field
#      role=skipped, an install whose first boot has not reported yet);
#   6. write a boot sector, an ESP partition entry and an "installed" marker to install_dev;
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

# Splits an ip= value at the colons outside [...] (IPv6 addresses), one field a line, and
# takes the brackets off a field they enclose, as nm-initrd-generator's get_word does.
split_ip() {
    printf '%s\n' "$1" | awk '{
        f = ""; depth = 0
        for (i = 1; i <= length($0); i++) {
            c = substr($0, i, 1)
            if (c == "[") depth++
            else if (c == "]") depth--
            if (c == ":" && depth == 0) { print f; f = "" } else f = f c
        }
        print f
    }' | sed 's/^\[\(.*\)\]$/\1/'
}

# Reads the ip= arguments for interface $1 with MAC $2 the way NetworkManager's
# nm-initrd-generator merges them into one profile (NetworkManager,
# src/nm-initrd-generator/nmi-cmdline-reader.c, reader_parse_ip), for the forms okd-appliance
# writes: IFACE:KIND and [ADDR6]::[GW6]:PREFIX:HOST:IFACE:KIND, KIND none or dhcp, IFACE a
# name, a MAC (colons or hyphens) or empty (the one default profile: this image has one NIC).
# In order: a static address makes its family manual; "none" disables each family without an
# address; "dhcp" turns IPv4 DHCP on, and IPv6 autoconfiguration where IPv6 has no address.
# Sets ip4_method (auto: DHCP, or disabled), ip6_method (auto, manual or disabled), ip6_addr,
# ip6_prefix, ip6_gw, ip_host and ip_args (how many named this NIC). Anything else fails.
read_ip_args() {
    ip4_method=auto ip6_method=auto ip6_addr="" ip6_prefix="" ip6_gw="" ip_host="" ip_args=0
    set -f # "[fd00::1]" is a glob pattern
    for word in $cmdline; do
        case "$word" in ip=*) ;; *) continue ;; esac
        value=${word#ip=}
        n=0
        while IFS= read -r f; do
            n=$((n + 1))
            eval "f$n=\$f"
        done <<EOF
$(split_ip "$value")
EOF
        addr="" gw="" prefix="" host=""
        case $n in
            1) spec="" kind=$f1 ;;
            2) spec=$f1 kind=$f2 ;;
            7) addr=$f1 gw=$f3 prefix=$f4 host=$f5 spec=$f6 kind=$f7 ;;
            *) fail cmdline "$word: a form this image does not read" ;;
        esac
        spec_mac=$(printf %s "$spec" | tr 'A-F-' 'a-f:')
        [ -z "$spec" ] || [ "$spec" = "$1" ] || [ "$spec_mac" = "$2" ] || continue
        ip_args=$((ip_args + 1))
        if [ -n "$addr" ]; then
            case "$addr" in *:*) ;; *) fail cmdline "$word: a static IPv4 address (not read here)" ;; esac
            ip6_method=manual ip6_addr=$addr ip6_prefix=${prefix:-64} ip6_gw=$gw
            [ -n "$host" ] && ip_host=$host
        fi
        case "$kind" in
            none)
                [ -n "$ip6_addr" ] || ip6_method=disabled
                ip4_method=disabled
                ;;
            dhcp)
                ip4_method=auto
                [ -n "$ip6_addr" ] || ip6_method=auto
                ;;
            *) fail cmdline "$word: method $kind (not read here)" ;;
        esac
    done
    set +f
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

read_ip_args "$iface" "$mac"
if [ "$ip_args" != 0 ]; then
    field ip_args "$ip_args"
    field ip4_method "$ip4_method"
    field ip6_method "$ip6_method"
    field ip_host "$ip_host"
fi
if [ "$ip6_method" = manual ]; then
    ip -6 addr add "$ip6_addr/$ip6_prefix" dev "$iface" || fail network "can't set $ip6_addr"
    if [ -n "$ip6_gw" ]; then
        ip -6 route add default via "$ip6_gw" dev "$iface" || fail network "no route via $ip6_gw"
    fi
    # Duplicate address detection: the address is no source until it is done (~1 s).
    tries=0
    while ip -6 addr show dev "$iface" | grep -q tentative && [ $tries -lt 50 ]; do
        usleep 100000
        tries=$((tries + 1))
    done
    ip -6 addr show dev "$iface" | grep -q tentative && fail network "$ip6_addr still tentative"
    field ip6 "$ip6_addr/$ip6_prefix"
    field ip6_gw "$ip6_gw"
    say "$iface has $ip6_addr/$ip6_prefix${ip6_gw:+, gateway $ip6_gw}"
fi

if [ "$NETWORK" = static ]; then
    ifconfig "$iface" "$STATIC_IP" netmask "$STATIC_MASK" || fail network "can't set $STATIC_IP"
    ip=$STATIC_IP
    hostname=""
elif [ "$ip4_method" = auto ]; then
    udhcpc -i "$iface" -s /etc/okd-e2e/udhcpc.sh -f -q -n -t 10 -T 2 > /tmp/udhcpc.log 2>&1 ||
        fail dhcp "no lease on $iface"
    ip=$(cat /run/okd-e2e/ip)
    hostname=$(cat /run/okd-e2e/hostname)
    # Which server answered (several clusters may share the segment).
    field dhcp_server "$(cat /run/okd-e2e/serverid)"
else
    # ip= disabled IPv4 on this NIC: no DHCP, as NetworkManager would do none.
    ip=""
    hostname=""
fi
field ip "$ip"
field hostname "$hostname"
say "$iface ($mac) has ${ip:-no IPv4 address}${hostname:+, host name $hostname}"

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

if [ -n "$IGNITION_HOST" ]; then
    rest=${ignition_url#http://}
    ignition_url="http://$IGNITION_HOST/${rest#*/}"
fi
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

# An image built without_first_boot stops where an installer that wrote the disk hands over:
# the installed system's first boot, which would fetch the role config, is left to the disk.
if [ "$mode" = live ]; then
    :
elif [ "$FIRST_BOOT" = no ]; then
    field role skipped
else
    fetch_role
fi

# Sector 0: a boot sector whose code prints a banner on COM1 (so a later BIOS disk boot shows on
# the serial console) and an MBR partition entry for the EFI System Partition a UEFI VM's disk
# holds at 1 MiB (harness/efidisk.rs: its loader prints sector 2); sector 1: the marker the test
# reads back from the disk image; sector 2: the banner again, for the EFI loader.
banner="okd-e2e: booted from disk of ${ignition_host:-unknown}"
dd if=/dev/zero of="$install_dev" bs=512 count=3 conv=notrunc 2>/dev/null || fail disk "can't write $install_dev"
dd if=/etc/okd-e2e/bootcode of="$install_dev" bs=1 conv=notrunc 2>/dev/null
printf '%s\r\n' "$banner" | dd of="$install_dev" bs=1 seek="$BANNER_OFFSET" conv=notrunc 2>/dev/null
dd if=/etc/okd-e2e/partition of="$install_dev" bs=1 seek=446 conv=notrunc 2>/dev/null
printf '\125\252' | dd of="$install_dev" bs=1 seek=510 conv=notrunc 2>/dev/null
printf 'okd-e2e-installed:%s\n' "$fields" | dd of="$install_dev" bs=512 seek=1 conv=notrunc 2>/dev/null
printf '%s\r\n' "$banner" | dd of="$install_dev" bs=512 seek=2 conv=notrunc 2>/dev/null
sync
field disk "$install_dev"
finish installed reboot
