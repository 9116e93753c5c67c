#!/bin/sh
# agent-base-image.sh makes the OS image that the global repository's
# Dockerfile.base builds on (CHOIR_OS_IMAGE), without any image registry:
# mmdebstrap builds a Debian root filesystem from the package archive this
# machine's apt already uses, and `docker import` turns it into an image.
#
#   scripts/agent-base-image.sh [image]        default image: choir-os:bookworm
#
# Then build agents with that image as CHOIR_OS_IMAGE, e.g. a Dockerfile.base
# starting with
#
#   ARG CHOIR_OS_IMAGE=choir-os:bookworm
#   FROM ${CHOIR_OS_IMAGE}
#
# Environment: SUITE (default bookworm), PACKAGES (comma-separated; default
# git,openssh-client,python3-minimal,ripgrep,ca-certificates). Needs root
# (or a user mmdebstrap can run as), mmdebstrap and a Docker engine.
set -eu

image=${1:-choir-os:bookworm}
suite=${SUITE:-bookworm}
packages=${PACKAGES:-git,openssh-client,python3-minimal,ripgrep,ca-certificates}

if ! command -v mmdebstrap >/dev/null 2>&1; then
	echo "agent-base-image: mmdebstrap is not installed: apt-get install -y mmdebstrap" >&2
	exit 1
fi
if ! docker info >/dev/null 2>&1; then
	echo "agent-base-image: cannot reach the Docker engine: is dockerd running?" >&2
	exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

# With no mirror argument mmdebstrap uses this machine's apt sources, so
# no host name is written here. The hooks drop what must not be baked: the
# host's resolver and hostname, apt's caches and lists.
mmdebstrap --variant=minbase --include="$packages" \
	--customize-hook='rm -f "$1/etc/resolv.conf" "$1/etc/hostname"; : >"$1/etc/resolv.conf"; : >"$1/etc/hostname"' \
	--customize-hook='chroot "$1" apt-get clean; rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
	"$suite" "$tmp/rootfs.tar"

docker import \
	--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	--change 'CMD ["/bin/bash"]' \
	--change "LABEL choir.os_suite=$suite" \
	"$tmp/rootfs.tar" "$image" >/dev/null

echo "agent-base-image: built $image ($(docker image inspect --format '{{.Size}}' "$image") bytes)"
