#!/bin/sh
# udhcpc event script of the test initramfs: applies the lease and leaves the address and the
# host name (DHCP option 12) and the server identifier (option 54) in /run/okd-e2e for /init.
# Never touches anything else.
case "$1" in
    deconfig)
        ifconfig "$interface" 0.0.0.0
        ;;
    bound | renew)
        ifconfig "$interface" "$ip" netmask "${subnet:-255.255.255.0}"
        mkdir -p /run/okd-e2e
        printf %s "$ip" > /run/okd-e2e/ip
        printf %s "$hostname" > /run/okd-e2e/hostname
        printf %s "$serverid" > /run/okd-e2e/serverid
        ;;
esac
exit 0
