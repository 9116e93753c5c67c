#!/usr/bin/env bash
# cluster.sh starts (or stops) a PostgreSQL 15 cluster sized for the hybrid
# search benchmark: the test cluster of scripts/devpg.sh keeps Postgres'
# default 128 MB of shared_buffers, less than a 100k-chunk corpus, which
# would measure the OS page cache instead of the query. Run
# scripts/devpg.sh start once first: it installs PostgreSQL, RUM and pgvector.
#
#   bench/hybrid/cluster.sh start   then: go run ./bench/hybrid -server "$(bench/hybrid/cluster.sh url)"
#   bench/hybrid/cluster.sh stop
#
# Data lives on disk under CHOIR_BENCH_PG_ROOT (default /var/tmp/choir-bench-pg):
# a 1M-chunk corpus takes about 8 GB. fsync is off: benchmark data only.
set -euo pipefail
PGBIN=/usr/lib/postgresql/15/bin
ROOT=${CHOIR_BENCH_PG_ROOT:-/var/tmp/choir-bench-pg}
PORT=${CHOIR_BENCH_PG_PORT:-55433}
SHARED_BUFFERS=${CHOIR_BENCH_SHARED_BUFFERS:-4GB}

case "${1:-}" in
start)
	mkdir -p "$ROOT/sock" "$ROOT/log"
	chown postgres:postgres "$ROOT" "$ROOT/sock" "$ROOT/log"
	if [ ! -f "$ROOT/data/PG_VERSION" ]; then
		install -d -o postgres -g postgres "$ROOT/data"
		runuser -u postgres -- "$PGBIN/initdb" -D "$ROOT/data" -U postgres --auth=trust -E UTF8 >/dev/null
	fi
	if ! runuser -u postgres -- "$PGBIN/pg_ctl" -D "$ROOT/data" status >/dev/null 2>&1; then
		runuser -u postgres -- "$PGBIN/pg_ctl" -D "$ROOT/data" -l "$ROOT/log/postgres.log" -w -t 120 start -o \
			"-p $PORT -k $ROOT/sock -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off \
-c full_page_writes=off -c shared_buffers=$SHARED_BUFFERS -c effective_cache_size=12GB -c work_mem=16MB \
-c max_wal_size=8GB -c checkpoint_timeout=30min" >/dev/null
	fi
	echo "postgres://postgres@127.0.0.1:$PORT/postgres?sslmode=disable"
	;;
stop)
	runuser -u postgres -- "$PGBIN/pg_ctl" -D "$ROOT/data" -m fast stop >/dev/null
	;;
url)
	echo "postgres://postgres@127.0.0.1:$PORT/postgres?sslmode=disable"
	;;
*)
	echo "usage: $0 start|stop|url" >&2
	exit 2
	;;
esac
