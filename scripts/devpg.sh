#!/usr/bin/env bash
# devpg.sh starts a throwaway PostgreSQL 15 cluster with pgvector and RUM for
# development and tests, installing what is missing on a Debian 12 machine.
#
#   scripts/devpg.sh start   install if needed, start (a no-op when running)
#   scripts/devpg.sh stop    stop the cluster
#   scripts/devpg.sh url     print the connection URL
#   scripts/devpg.sh env     print shell exports for the test suite
#
# The cluster runs as the postgres user with fsync off on a private port and
# socket directory, with trust authentication: it is for tests and local
# demos, never for data you want to keep.
set -euo pipefail

PGVER=15
PGBIN=/usr/lib/postgresql/$PGVER/bin
# tmpfs: creating a database from a template costs ~20 ms there against
# ~400 ms on this class of machine's ext4 (mounted with discard).
ROOT=${CHOIR_PG_ROOT:-/dev/shm/choir-pg}
PORT=${CHOIR_PG_PORT:-55432}
DATA=$ROOT/data
SOCK=$ROOT/sock
LOG=$ROOT/log/postgres.log

log() { printf 'devpg: %s\n' "$*" >&2; }

need_root() {
	if [ "$(id -u)" -ne 0 ]; then
		log "installing packages needs root; run as root or install: $*"
		exit 1
	fi
}

install_packages() {
	local missing=()
	for p in postgresql-$PGVER postgresql-$PGVER-rum postgresql-server-dev-$PGVER dpkg-dev make gcc; do
		dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return
	need_root "${missing[*]}"
	log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; then
		apt-get update -q >/dev/null
		apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
	fi
	# Debian's package creates and starts a default cluster on port 5432; we
	# do not use it, and leave it as the package set it up.
}

# debian_uri prints the archive URI the machine's own apt sources name for
# the main Debian suite, so that no host name is written into this script.
debian_uri() {
	local uri=""
	if [ -f /etc/apt/sources.list.d/debian.sources ]; then
		uri=$(awk '/^URIs:/ {for (i = 2; i <= NF; i++) if ($i !~ /security/) {print $i; exit}}' \
			/etc/apt/sources.list.d/debian.sources)
	fi
	if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
		uri=$(awk '$1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' \
			/etc/apt/sources.list)
	fi
	if [ -z "$uri" ]; then
		log "cannot find a Debian archive URI in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list"
		exit 1
	fi
	printf '%s\n' "$uri"
}

install_pgvector() {
	local ext=/usr/share/postgresql/$PGVER/extension/vector.control
	[ -f "$ext" ] && return
	need_root "pgvector (built from Debian's trixie source package)"
	local work
	work=$(mktemp -d)
	mkdir -p "$work/lists/partial" "$work/etc"
	# A private apt state keeps the system's sources and lists untouched.
	printf 'deb-src %s trixie main\n' "$(debian_uri)" >"$work/etc/sources.list"
	local aptopts=(-o "Dir::State::Lists=$work/lists" -o "Dir::Etc::sourcelist=$work/etc/sources.list"
		-o "Dir::Etc::sourceparts=-" -o "APT::Get::List-Cleanup=0" -o "APT::Sandbox::User=root")
	log "fetching pgvector source from trixie"
	apt-get "${aptopts[@]}" update -q >/dev/null
	(cd "$work" && apt-get "${aptopts[@]}" source -q --download-only pgvector >/dev/null)
	(cd "$work" && dpkg-source -x --no-check pgvector_*.dsc src >/dev/null)
	log "building pgvector"
	make -s -C "$work/src" PG_CONFIG=$PGBIN/pg_config >/dev/null
	make -s -C "$work/src" PG_CONFIG=$PGBIN/pg_config install >/dev/null
	rm -rf "$work"
}

running() {
	[ -f "$DATA/PG_VERSION" ] && runuser -u postgres -- "$PGBIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1
}

start() {
	if running; then
		log "already running on port $PORT (socket $SOCK)"
		return
	fi
	install_packages
	install_pgvector
	mkdir -p "$ROOT" "$SOCK" "$(dirname "$LOG")"
	chown postgres:postgres "$ROOT" "$SOCK" "$(dirname "$LOG")"
	if [ ! -f "$DATA/PG_VERSION" ]; then
		rm -rf "$DATA"
		mkdir -p "$DATA"
		chown postgres:postgres "$DATA"
		log "initdb $DATA"
		runuser -u postgres -- "$PGBIN/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 \
			--locale=C.UTF-8 >/dev/null
	fi
	log "starting on port $PORT"
	runuser -u postgres -- "$PGBIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 start -o \
		"-p $PORT -k $SOCK -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off \
-c full_page_writes=off -c max_connections=300" >/dev/null || {
		log "postgres did not start; its log says:"
		tail -n 20 "$LOG" >&2
		exit 1
	}
	runuser -u postgres -- "$PGBIN/psql" -h "$SOCK" -p "$PORT" -U postgres -d postgres -qAt \
		-c "SELECT 1 FROM pg_database WHERE datname = 'choir'" | grep -q 1 ||
		runuser -u postgres -- "$PGBIN/psql" -h "$SOCK" -p "$PORT" -U postgres -d postgres -q \
			-c "CREATE DATABASE choir"
}

stop() {
	if running; then
		runuser -u postgres -- "$PGBIN/pg_ctl" -D "$DATA" -m fast stop >/dev/null
	fi
}

url() { printf 'postgres://postgres@127.0.0.1:%s/choir?sslmode=disable\n' "$PORT"; }

case "${1:-start}" in
start) start ;;
stop) stop ;;
url) url ;;
env)
	printf 'export CHOIR_TEST_DATABASE_URL=%q\n' "$(url)"
	printf 'export CHOIR_PG_SOCKET_DIR=%q\nexport CHOIR_PG_PORT=%q\n' "$SOCK" "$PORT"
	;;
*)
	log "unknown command $1 (want start, stop, url or env)"
	exit 2
	;;
esac
