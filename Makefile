# Choir's build, test and local-run entry points. `make test` is what CI
# runs (.ci/run); `make run DIR=...` starts choird on local defaults.

export PATH := /usr/local/go/bin:$(PATH)
SHELL := /bin/bash

DIR ?= $(HOME)/.choir.d
PG_URL = $(shell scripts/devpg.sh url)
PG_BASE = $(patsubst %/choir?sslmode=disable,%,$(PG_URL))
VET_DB = choir_sqlc_vet

.PHONY: all build generate check-generated check-tidy vet-sql vet devpg test test-short run demo bench kill-anywhere injection clean

all: build

build:
	mkdir -p bin
	CGO_ENABLED=0 go build -trimpath -o bin/ ./cmd/...

# Regenerate db/ from queries/ and the migrations in sql/.
generate:
	go tool sqlc generate

# Fail when db/ is not what sqlc would generate now.
check-generated:
	@go tool sqlc diff || { echo "db/ is stale: run 'make generate' and commit the result" >&2; exit 1; }

# Fail when go.mod or go.sum is not what `go mod tidy` would write now (a
# direct requirement marked `// indirect`, a stale or missing sum).
check-tidy:
	@go mod tidy -diff >/dev/null || { echo "go.mod or go.sum is not tidy: run 'go mod tidy' and commit the result" >&2; exit 1; }

devpg:
	scripts/devpg.sh start

# sqlc vet prepares every query against a freshly migrated database.
vet-sql: devpg
	psql -q "$(PG_URL)" -c 'DROP DATABASE IF EXISTS $(VET_DB) WITH (FORCE)' -c 'CREATE DATABASE $(VET_DB)'
	go run ./cmd/choirctl db migrate --database-url "$(PG_BASE)/$(VET_DB)?sslmode=disable" >/dev/null
	CHOIR_SQLC_DATABASE_URL="$(PG_BASE)/$(VET_DB)?sslmode=disable" go tool sqlc vet

vet: check-tidy check-generated vet-sql
	go vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "not gofmt-formatted:"; gofmt -l $$(git ls-files '*.go'); exit 1; } >&2

# The whole suite, against the throwaway Postgres (installed on first use).
test: vet
	scripts/testdeps.sh
	CHOIR_REQUIRE_DOCKER=$${CHOIR_REQUIRE_DOCKER:-1} CHOIR_TEST_DATABASE_URL="$(PG_URL)" go test -race -count=1 -timeout 20m ./...

test-short: devpg
	CHOIR_TEST_DATABASE_URL="$(PG_URL)" go test -count=1 ./...

# choird on local defaults: the throwaway Postgres and a generated local
# configuration under DIR (created on first run, reused afterwards).
run: devpg build
	scripts/testdeps.sh
	@test -f "$(DIR)/config.json" || bin/choirctl --home "$(DIR)" init --local
	bin/choirctl --home "$(DIR)" db migrate
	exec bin/choird --home "$(DIR)" --runtime=process

# The whole stack with nothing from outside: Postgres, choird, one agent,
# stand-ins for Telegram and the model (a real model when the environment
# names one, as for init --local), a scripted conversation and the psql
# audit queries (e2e/demo_test.go, which make test also runs). Its test
# binary is built as choird and choir-agent are (no cgo, -trimpath), so the
# three share every compiled package.
demo: devpg
	scripts/testdeps.sh
	CHOIR_DEMO=1 CHOIR_DEMO_START=$$(date +%s) CHOIR_TEST_DATABASE_URL="$(PG_URL)" CGO_ENABLED=0 \
		go test -trimpath -vet=off -count=1 -run '^TestDemo$$' -v ./e2e

# The benchmark suite: bench/report.md and bench/report.json, each figure
# beside its target (about 15 minutes; not part of `make test`). With
# COMPARE=<rev>, each figure is measured on that revision too, in turn.
bench: devpg
	scripts/testdeps.sh
	go run ./bench/report -database-url "$(PG_URL)" $(if $(COMPARE),-compare "$(COMPARE)")

# The kill-anywhere suite over side effects, in full (10 trials per point,
# tool and victim in turn; make test runs one); its table goes into
# bench/kill-anywhere.md, which make bench's report carries.
kill-anywhere: devpg
	scripts/testdeps.sh
	CHOIR_FAULT_TRIALS=$${CHOIR_FAULT_TRIALS:-10} CHOIR_KILL_TABLE="$(CURDIR)/bench/kill-anywhere.md" \
		CHOIR_TEST_DATABASE_URL="$(PG_URL)" go test -count=1 -timeout 60m -run '^TestActionsOnceUnderKills$$' -v ./e2e/

# The prompt-injection suite in full (every carrier against every
# attack; make test runs three attacks per carrier): its table, the attack
# success and the extra approvals on benign tasks go into
# bench/injection.md, which make bench's report carries.
injection: devpg
	CHOIR_INJECTION_FULL=1 CHOIR_INJECTION_TABLE="$(CURDIR)/bench/injection.md" \
		CHOIR_TEST_DATABASE_URL="$(PG_URL)" go test -count=1 -timeout 30m -run '^TestPromptInjection$$' -v ./e2e/

clean:
	rm -rf bin
