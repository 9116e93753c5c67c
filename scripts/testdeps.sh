#!/usr/bin/env bash
# testdeps.sh installs the Debian packages the test suite uses besides
# PostgreSQL (scripts/devpg.sh): git for the agent build tests and
# busybox-static as the tiny OS image of test containers, opus-tools, whose
# opusinfo checks the voice messages choir.tts.speak joins, and chromium for
# the browser worker (daemon/browser; Debian 12 ships it in the security
# suite), and systemd, which deploy_systemd_test.go boots in a container to
# run deploy/choird.service. It is a no-op when they are present.
set -euo pipefail
missing=()
for p in git busybox-static opus-tools chromium systemd; do
	dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
	echo "testdeps: installing ${missing[*]} needs root; run as root or install them" >&2
	exit 1
fi
echo "testdeps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null ||
	{ apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; }
