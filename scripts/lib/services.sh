# shellcheck shell=bash
# scripts/lib/services.sh — shared by scripts/test and scripts/bench.
#
# Makes sure the tools and services the Lockstep test suite needs exist:
#   ensure_packages   installs missing OS packages (root + apt-get only)
#   ensure_services   checks Postgres and Redis at LOCKSTEP_TEST_POSTGRES_URL /
#                     LOCKSTEP_TEST_REDIS_URL and, if unreachable, starts
#                     throwaway instances on free ports and exports their URLs;
#                     the same for an S3 server at LOCKSTEP_TEST_S3_URL
#                     (versitygw, installed with `go install` if missing)
#   stop_services     stops and removes whatever ensure_services started
#   services_watch    starts a background watcher: a throwaway helper that
#                     dies mid-run is named at once (pid, exit status, URL),
#                     its log is copied to LOCKSTEP_TEST_LOG_DIR and its tail
#                     printed
#   services_check STAGE  after a stage: names every helper that died during
#                     it (returns 1) and starts it again on the same port
#   services_summary  at the end: one line per helper that died in the run
#
# Callers must `trap stop_services EXIT` (done by services_init).
# The helpers started here are listed in $LOCKSTEP_TEST_HELPERS (a file, one
# "name pid url log" line each), which internal/testenv reads to say, when a
# test cannot reach one, whether it died.
#
# Knobs:
#   LOCKSTEP_TEST_NO_INSTALL=1   never run apt-get
#   LOCKSTEP_TEST_KEEP_SERVICES=1  leave throwaway instances running (debug)
#   LOCKSTEP_TEST_S3_URL=http://KEY:SECRET@host:port  use this S3 server
#                                (buckets are created and removed per test)
#   LOCKSTEP_TEST_VERSITYGW=PATH  the versitygw binary (default: PATH, then
#                                $(go env GOPATH)/bin, else go install
#                                versitygw@$VERSITYGW_VERSION into GOPATH/bin)
#   LOCKSTEP_TEST_LOG_DIR=DIR    where the log of a helper that died is kept
#                                (default ${TMPDIR:-/tmp}/lockstep-test-logs;
#                                never deleted by these scripts)

: "${LOCKSTEP_TEST_POSTGRES_URL:=postgres://postgres@127.0.0.1:5432/postgres}"
: "${LOCKSTEP_TEST_REDIS_URL:=redis://127.0.0.1:6379/0}"
export LOCKSTEP_TEST_POSTGRES_URL LOCKSTEP_TEST_REDIS_URL

_svc_dir=""        # temp dir of throwaway instances, empty if none
_svc_pg_data=""    # data dir of the throwaway postgres
_svc_pg_bin=""     # directory holding initdb/pg_ctl/postgres
_svc_pg_user=""    # OS user running the throwaway postgres ("" = current user)
_svc_redis_pid=""  # pid of the throwaway redis-server
_svc_s3_pid=""     # pid of the throwaway versitygw
_svc_pg_port=""    # ports and S3 keys, to start a helper that died again
_svc_redis_port="" # on the same URL
_svc_redis_bin=""
_svc_s3_port=""
_svc_s3_secret=""
_svc_s3_bin=""
_svc_watch_pid=""  # pid of the background watcher
_svc_deaths=()     # "name (pid N): exit …; log kept at …" of every death seen

# The S3 server of the tests (issue #11): versitygw serves a directory over
# the S3 protocol. Pinned: a new release must not change the suite under us.
VERSITYGW_VERSION=v1.8.0

log() { printf '%s: %s\n' "${LOG_NAME:-scripts}" "$*" >&2; }
die() { log "$*"; exit 2; }

services_init() {
	trap stop_services EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	# Go may live outside a sudo/CI PATH.
	if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
		PATH="/usr/local/go/bin:$PATH"
	fi
	command -v go >/dev/null 2>&1 || die "go not found: install Go $(sed -n 's/^go //p' go.mod) (https://go.dev/dl/) and put it in PATH"
}

# have_cmd NAME: like command -v, but also looks in the sbin directories that
# are not in a non-root PATH (mkfs.btrfs, mkfs.xfs live there).
have_cmd() {
	command -v "$1" >/dev/null 2>&1 || [[ -x /usr/sbin/$1 || -x /sbin/$1 ]]
}

have_chromium() {
	local n
	for n in chromium chromium-browser google-chrome google-chrome-stable headless_shell; do
		command -v "$n" >/dev/null 2>&1 && return 0
	done
	return 1
}

# find_pg_bin: print the directory with initdb, pg_ctl and postgres, newest
# version first; fail if there is none.
find_pg_bin() {
	local d
	if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
		d=$(dirname "$(readlink -f "$(command -v initdb)")")
		if [[ -x $d/postgres && -x $d/pg_ctl ]]; then echo "$d"; return 0; fi
	fi
	for d in $(ls -d /usr/lib/postgresql/*/bin /usr/pgsql-*/bin 2>/dev/null | sort -t/ -k4 -V -r); do
		if [[ -x $d/initdb && -x $d/pg_ctl && -x $d/postgres ]]; then echo "$d"; return 0; fi
	done
	return 1
}

# url_host_port URL DEFAULT_PORT: print "host port" of a URL.
url_host_port() {
	local rest=${1#*://} hp host port
	rest=${rest%%/*}
	rest=${rest%%\?*}
	hp=${rest##*@}
	if [[ $hp == *:* ]]; then host=${hp%:*}; port=${hp##*:}; else host=$hp; port=$2; fi
	echo "${host:-127.0.0.1} ${port:-$2}"
}

tcp_open() { timeout 3 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null; }

postgres_reachable() {
	if command -v pg_isready >/dev/null 2>&1; then
		pg_isready -q -t 3 -d "$LOCKSTEP_TEST_POSTGRES_URL" >/dev/null 2>&1
		return
	fi
	# shellcheck disable=SC2046
	tcp_open $(url_host_port "$LOCKSTEP_TEST_POSTGRES_URL" 5432)
}

redis_reachable() {
	if command -v redis-cli >/dev/null 2>&1; then
		[[ $(timeout 5 redis-cli -u "$LOCKSTEP_TEST_REDIS_URL" ping 2>/dev/null) == PONG ]]
		return
	fi
	# shellcheck disable=SC2046
	tcp_open $(url_host_port "$LOCKSTEP_TEST_REDIS_URL" 6379)
}

# free_port: print a TCP port on 127.0.0.1 that nothing listens on.
free_port() {
	local p i
	for i in $(seq 1 100); do
		p=$((20000 + RANDOM % 40000))
		tcp_open 127.0.0.1 "$p" || { echo "$p"; return 0; }
	done
	return 1
}

# ensure_packages: install the OS packages the suite needs that are missing.
# Only as root with apt-get; otherwise it lists what is missing and goes on
# (the tests that need a missing tool fail and say what to install).
ensure_packages() {
	local need=()
	have_cmd git || need+=(git)
	have_chromium || need+=(chromium)
	have_cmd mkfs.btrfs || need+=(btrfs-progs)
	have_cmd mkfs.xfs || need+=(xfsprogs)
	have_cmd gcc || need+=(gcc libc6-dev) # go test -race needs cgo
	have_cmd python3 || need+=(python3 python3-venv) # clients/python's tests
	have_cmd npx || need+=(nodejs npm)                # @redocly/cli lints api/openapi.yaml; clients/typescript, examples/recipes (Node 20+)
	# Servers only matter if nothing is reachable and we must start our own.
	if ! postgres_reachable && ! find_pg_bin >/dev/null; then need+=(postgresql); fi
	if ! redis_reachable && ! have_cmd redis-server; then need+=(redis-server); fi
	((${#need[@]})) || return 0

	local why=""
	if [[ ${LOCKSTEP_TEST_NO_INSTALL:-} == 1 ]]; then why="LOCKSTEP_TEST_NO_INSTALL=1"
	elif [[ $(id -u) != 0 ]]; then why="not root"
	elif ! command -v apt-get >/dev/null 2>&1; then why="no apt-get"
	fi
	if [[ -n $why ]]; then
		log "missing OS packages: ${need[*]} (not installing: $why)"
		log "install them with: apt-get install -y ${need[*]}"
		return 0
	fi
	log "installing missing OS packages: ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	local aptlog
	aptlog=$(mktemp /tmp/lockstep-apt.XXXXXX)
	if ! apt-get update -qq >"$aptlog" 2>&1; then
		log "apt-get update failed (see below); continuing without installing"
		tail -n 20 "$aptlog" >&2
		rm -f "$aptlog"
		return 0
	fi
	if ! apt-get install -y -qq --no-install-recommends "${need[@]}" >>"$aptlog" 2>&1; then
		# One unavailable package (chromium on some arches) must not block the rest.
		local p
		for p in "${need[@]}"; do
			apt-get install -y -qq --no-install-recommends "$p" >>"$aptlog" 2>&1 ||
				log "could not install $p; tests that need it will fail and say so"
		done
	fi
	rm -f "$aptlog"
}

# ensure_services: make LOCKSTEP_TEST_POSTGRES_URL and LOCKSTEP_TEST_REDIS_URL
# point at running servers, starting throwaway ones if needed.
ensure_services() {
	local missing=()
	if postgres_reachable; then
		log "postgres: using $(redact "$LOCKSTEP_TEST_POSTGRES_URL")"
	else
		start_postgres || missing+=("postgresql (apt-get install -y postgresql)")
	fi
	if redis_reachable; then
		log "redis: using $LOCKSTEP_TEST_REDIS_URL"
	else
		start_redis || missing+=("redis-server (apt-get install -y redis-server)")
	fi
	if [[ -n ${LOCKSTEP_TEST_S3_URL:-} ]]; then
		s3_reachable || die "s3: nothing answers at $(redact "$LOCKSTEP_TEST_S3_URL") (LOCKSTEP_TEST_S3_URL); unset it to start a throwaway versitygw"
		log "s3: using $(redact "$LOCKSTEP_TEST_S3_URL")"
	else
		start_s3 || missing+=("versitygw (go install github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION, or set LOCKSTEP_TEST_VERSITYGW to its path)")
	fi
	if ((${#missing[@]})); then
		log "cannot provide the services the tests need; install: ${missing[*]}"
		log "or point LOCKSTEP_TEST_POSTGRES_URL / LOCKSTEP_TEST_REDIS_URL / LOCKSTEP_TEST_S3_URL at running servers"
		exit 2
	fi
}

# redact URL: hide the password, if any.
redact() {
	local re='^([a-z]+://[^:/@]*):[^@/]*@(.*)$'
	if [[ $1 =~ $re ]]; then echo "${BASH_REMATCH[1]}:xxxxx@${BASH_REMATCH[2]}"; else echo "$1"; fi
}

_svc_mkdir() {
	[[ -n $_svc_dir ]] && return 0
	_svc_dir=$(mktemp -d "${TMPDIR:-/tmp}/lockstep-test.XXXXXX")
	chmod 755 "$_svc_dir"
}

# _as_pg_user CMD...: run CMD as the user owning the throwaway postgres.
_as_pg_user() {
	if [[ -z $_svc_pg_user ]]; then
		"$@"
	elif command -v runuser >/dev/null 2>&1; then
		(cd "$_svc_pg_data/.." && runuser -u "$_svc_pg_user" -- "$@")
	else
		(cd "$_svc_pg_data/.." && su -s /bin/sh "$_svc_pg_user" -c "$(printf '%q ' "$@")")
	fi
}

start_postgres() {
	log "postgres: nothing reachable at $(redact "$LOCKSTEP_TEST_POSTGRES_URL"); starting a throwaway instance"
	_svc_pg_bin=$(find_pg_bin) || { log "postgres: no initdb/pg_ctl/postgres binaries found"; return 1; }
	_svc_mkdir
	_svc_pg_data=$_svc_dir/pg
	mkdir -p "$_svc_pg_data"
	if [[ $(id -u) == 0 ]]; then
		# initdb refuses to run as root.
		if id postgres >/dev/null 2>&1; then
			_svc_pg_user=postgres
		else
			_svc_pg_user=lockstep-test
			id "$_svc_pg_user" >/dev/null 2>&1 ||
				useradd --system --no-create-home --shell /usr/sbin/nologin "$_svc_pg_user" ||
				{ log "postgres: cannot create user $_svc_pg_user to run initdb"; return 1; }
		fi
		chown "$_svc_pg_user" "$_svc_pg_data"
	fi
	chmod 700 "$_svc_pg_data"

	if ! _as_pg_user "$_svc_pg_bin/initdb" -D "$_svc_pg_data" -U postgres --auth=trust \
		--encoding=UTF8 --no-locale --no-sync >"$_svc_dir/initdb.log" 2>&1; then
		log "postgres: initdb failed:"; cat "$_svc_dir/initdb.log" >&2; return 1
	fi
	local port try
	for try in 1 2 3; do
		port=$(free_port) || { log "postgres: no free port"; return 1; }
		if _pg_start "$port"; then
			export LOCKSTEP_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
			log "postgres: started throwaway $("$_svc_pg_bin/postgres" --version | awk '{print $3}') at $LOCKSTEP_TEST_POSTGRES_URL (pid $(_pg_pid), data $_svc_pg_data)"
			_svc_register
			return 0
		fi
	done
	log "postgres: failed to start:"; tail -n 20 "$_svc_pg_data/server.log" >&2
	return 1
}

# _pg_start PORT: start the throwaway cluster (already initdb'd) on PORT.
_pg_start() {
	# Durability off: this cluster lives for one test run.
	_as_pg_user "$_svc_pg_bin/pg_ctl" -D "$_svc_pg_data" -l "$_svc_pg_data/server.log" -w -t 60 \
		-o "-p $1 -k $_svc_pg_data -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c dynamic_shared_memory_type=mmap" \
		start >/dev/null 2>&1 || return 1
	_svc_pg_port=$1
}

# _pg_pid: the postmaster's pid (first line of postmaster.pid), if running.
_pg_pid() { head -n 1 "$_svc_pg_data/postmaster.pid" 2>/dev/null || true; }

start_redis() {
	log "redis: nothing reachable at $LOCKSTEP_TEST_REDIS_URL; starting a throwaway instance"
	local bin
	bin=$(command -v redis-server || true)
	[[ -z $bin && -x /usr/sbin/redis-server ]] && bin=/usr/sbin/redis-server
	[[ -n $bin ]] || { log "redis: no redis-server binary found"; return 1; }
	_svc_redis_bin=$bin
	_svc_mkdir
	local port try
	for try in 1 2 3; do
		port=$(free_port) || { log "redis: no free port"; return 1; }
		if _redis_start "$port"; then
			export LOCKSTEP_TEST_REDIS_URL="redis://127.0.0.1:$port/0"
			log "redis: started throwaway $("$bin" --version | grep -o 'v=[^ ]*') at $LOCKSTEP_TEST_REDIS_URL (pid $_svc_redis_pid)"
			_svc_register
			return 0
		fi
	done
	log "redis: failed to start:"; tail -n 20 "$_svc_dir/redis.log" >&2 2>/dev/null
	return 1
}

# _redis_start PORT: start the throwaway redis-server on PORT and wait
# until it answers.
_redis_start() {
	local i
	rm -f "$_svc_dir/redis.pid"
	"$_svc_redis_bin" --port "$1" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
		--dir "$_svc_dir" --pidfile "$_svc_dir/redis.pid" --logfile "$_svc_dir/redis.log" >/dev/null 2>&1 || return 1
	# Generous: a loaded CI machine can take seconds.
	for i in $(seq 1 300); do
		if tcp_open 127.0.0.1 "$1" && [[ -s $_svc_dir/redis.pid ]]; then
			_svc_redis_pid=$(cat "$_svc_dir/redis.pid")
			_svc_redis_port=$1
			return 0
		fi
		sleep 0.1
	done
	# Do not leave a late starter behind.
	[[ -s $_svc_dir/redis.pid ]] && kill "$(cat "$_svc_dir/redis.pid")" 2>/dev/null
	return 1
}

# s3_reachable: an S3 server answers HTTP at LOCKSTEP_TEST_S3_URL (any
# status: an unauthenticated request gets 403, which proves it is up).
s3_reachable() {
	# shellcheck disable=SC2046
	set -- $(url_host_port "$LOCKSTEP_TEST_S3_URL" 80)
	if command -v curl >/dev/null 2>&1; then
		local code
		code=$(curl -s -o /dev/null -m 3 -w '%{http_code}' "http://$1:$2/" 2>/dev/null) || return 1
		[[ $code != 000 ]]
		return
	fi
	tcp_open "$1" "$2"
}

# find_versitygw: print the path of a versitygw binary, installing the pinned
# version into $(go env GOPATH)/bin (once: later runs reuse it) if none exists.
find_versitygw() {
	local bin gobin
	if [[ -n ${LOCKSTEP_TEST_VERSITYGW:-} ]]; then
		[[ -x $LOCKSTEP_TEST_VERSITYGW ]] || { log "s3: LOCKSTEP_TEST_VERSITYGW=$LOCKSTEP_TEST_VERSITYGW is not an executable"; return 1; }
		echo "$LOCKSTEP_TEST_VERSITYGW"; return 0
	fi
	gobin=$(go env GOBIN)
	[[ -n $gobin ]] || gobin=$(go env GOPATH)/bin
	for bin in "$gobin/versitygw" "$(command -v versitygw || true)"; do
		# go install leaves no version in --version: ask the build info.
		if [[ -n $bin && -x $bin ]] && go version -m "$bin" 2>/dev/null |
			grep -qP "^\tmod\tgithub.com/versity/versitygw\t$VERSITYGW_VERSION\t"; then
			echo "$bin"; return 0
		fi
	done
	log "s3: installing versitygw $VERSITYGW_VERSION into $gobin (go install, once: 2-3 minutes on a fresh machine, longer on a busy one)"
	local out
	out=$(mktemp /tmp/lockstep-versitygw.XXXXXX)
	if ! GOBIN=$gobin go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION" >"$out" 2>&1; then
		log "s3: go install github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION failed:"
		tail -n 20 "$out" >&2; rm -f "$out"
		return 1
	fi
	rm -f "$out"
	[[ -x $gobin/versitygw ]] || { log "s3: go install did not produce $gobin/versitygw"; return 1; }
	echo "$gobin/versitygw"
}

# start_s3: start a throwaway versitygw (posix backend) on a free port and
# export LOCKSTEP_TEST_S3_URL (with its keys) and LOCKSTEP_TEST_VERSITYGW
# (tests that stop a server mid-operation start their own from it).
start_s3() {
	log "s3: LOCKSTEP_TEST_S3_URL unset; starting a throwaway versitygw"
	local bin
	bin=$(find_versitygw) || return 1
	export LOCKSTEP_TEST_VERSITYGW=$bin
	_svc_s3_bin=$bin
	_svc_mkdir
	mkdir -p "$_svc_dir/s3"
	_svc_s3_secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
	local port try
	for try in 1 2 3; do
		port=$(free_port) || { log "s3: no free port"; return 1; }
		if _s3_start "$port"; then
			log "s3: started throwaway versitygw $VERSITYGW_VERSION at http://127.0.0.1:$port (pid $_svc_s3_pid, data $_svc_dir/s3)"
			_svc_register
			return 0
		fi
	done
	unset LOCKSTEP_TEST_S3_URL
	log "s3: versitygw failed to start:"; tail -n 20 "$_svc_dir/versitygw.log" >&2
	return 1
}

# _s3_start PORT: start the throwaway versitygw on PORT (same keys and data
# directory every time) and wait until it answers.
_s3_start() {
	local i key=lockstep-test
	"$_svc_s3_bin" --quiet --access "$key" --secret "$_svc_s3_secret" --port "127.0.0.1:$1" posix "$_svc_dir/s3" \
		>>"$_svc_dir/versitygw.log" 2>&1 &
	_svc_s3_pid=$!
	export LOCKSTEP_TEST_S3_URL="http://$key:$_svc_s3_secret@127.0.0.1:$1"
	for i in $(seq 1 300); do
		kill -0 "$_svc_s3_pid" 2>/dev/null || break
		if s3_reachable; then
			_svc_s3_port=$1
			return 0
		fi
		sleep 0.1
	done
	kill "$_svc_s3_pid" 2>/dev/null || true
	wait "$_svc_s3_pid" 2>/dev/null || true
	_svc_s3_pid=""
	return 1
}

# _svc_helpers: one "name pid url log" line per throwaway helper started.
_svc_helpers() {
	local pg
	pg=$(_pg_pid)
	[[ -n $_svc_pg_port && -n $pg ]] && echo "postgres $pg $LOCKSTEP_TEST_POSTGRES_URL $_svc_pg_data/server.log"
	[[ -n $_svc_redis_port && -n $_svc_redis_pid ]] && echo "redis $_svc_redis_pid $LOCKSTEP_TEST_REDIS_URL $_svc_dir/redis.log"
	[[ -n $_svc_s3_port && -n $_svc_s3_pid ]] && echo "versitygw $_svc_s3_pid http://127.0.0.1:$_svc_s3_port $_svc_dir/versitygw.log"
	return 0
}

# _svc_register: (re)write the list of helpers that tests read
# ($LOCKSTEP_TEST_HELPERS) to name a helper that died.
_svc_register() {
	[[ -n $_svc_dir ]] || return 0
	_svc_helpers >"$_svc_dir/helpers"
	export LOCKSTEP_TEST_HELPERS=$_svc_dir/helpers
}

# _svc_keep_log NAME LOG: copy a dead helper's log where it is kept and
# print the copy's path.
_svc_keep_log() {
	local dir=${LOCKSTEP_TEST_LOG_DIR:-${TMPDIR:-/tmp}/lockstep-test-logs} kept
	mkdir -p "$dir" 2>/dev/null || dir=${TMPDIR:-/tmp}
	kept=$dir/$(date -u +%Y%m%dT%H%M%SZ)-$$-$1.log
	cp "$2" "$kept" 2>/dev/null || { echo "$2 (could not copy it)"; return 0; }
	echo "$kept"
}

# _svc_alive PID: the process exists and is not a zombie.
_svc_alive() {
	[[ -n $1 ]] && kill -0 "$1" 2>/dev/null || return 1
	[[ $(ps -o stat= -p "$1" 2>/dev/null) != Z* ]]
}

# services_watch: start a background loop that checks every 2 s that each
# throwaway helper still runs; the first time one is gone it says so on
# stderr (name, pid, URL, kept log and its last lines) and leaves a
# marker in $_svc_dir/dead/ for services_check.
services_watch() {
	[[ -n $_svc_dir && -z $_svc_watch_pid ]] || return 0
	mkdir -p "$_svc_dir/dead"
	local parent=$$
	(
		trap - EXIT INT TERM
		set +e
		while kill -0 "$parent" 2>/dev/null && [[ -d $_svc_dir/dead ]]; do
			while read -r name pid url logf; do
				[[ -e $_svc_dir/dead/$name.$pid ]] && continue
				_svc_alive "$pid" && continue
				kept=$(_svc_keep_log "$name" "$logf")
				log "HELPER DIED: the throwaway $name (pid $pid, $(redact "$url")) stopped while the tests ran; tests that need it fail with \"connection refused\"; its log is kept at $kept; last lines:"
				tail -n 20 "$kept" 2>/dev/null | sed 's/^/    /' >&2
				echo "$kept" >"$_svc_dir/dead/$name.$pid"
			done <"$_svc_dir/helpers"
			sleep 2
		done
	) &
	_svc_watch_pid=$!
}

# services_check STAGE [norevive]: name every throwaway helper that died
# during STAGE (with its exit status when known and where its log is kept),
# start it again on the same URL for the next stage (unless norevive), and
# return 1 if any died.
services_check() {
	[[ -n $_svc_dir && -f $_svc_dir/helpers ]] || return 0
	local name pid url logf kept status died=0 why lines
	lines=$(cat "$_svc_dir/helpers")
	while read -r name pid url logf; do
		[[ -n $name ]] || continue
		_svc_alive "$pid" && continue
		[[ -e $_svc_dir/dead/$name.$pid.reported ]] && continue
		died=1
		why="exit status unknown"
		if [[ $name == versitygw ]]; then
			# Our child: wait tells how it ended.
			status=0
			wait "$pid" 2>/dev/null || status=$?
			((status > 128)) && why="killed by signal $((status - 128))" || why="exit status $status"
		fi
		kept=""
		[[ -f $_svc_dir/dead/$name.$pid ]] && kept=$(cat "$_svc_dir/dead/$name.$pid")
		if [[ -z $kept ]]; then
			kept=$(_svc_keep_log "$name" "$logf")
			log "last lines of the $name log:"
			tail -n 20 "$kept" 2>/dev/null | sed 's/^/    /' >&2
		fi
		mkdir -p "$_svc_dir/dead" && echo "$kept" >"$_svc_dir/dead/$name.$pid" && : >"$_svc_dir/dead/$name.$pid.reported"
		_svc_deaths+=("$name (pid $pid, $(redact "$url")) died during $1 ($why); log kept at $kept")
		log "HELPER DIED during $1: the throwaway $name (pid $pid, $(redact "$url"), $why); its log is kept at $kept"
		[[ ${2:-} == norevive ]] || _svc_revive "$name"
	done <<<"$lines"
	_svc_register
	((died == 0))
}

# _svc_revive NAME: start a helper that died again on its port.
_svc_revive() {
	local ok=1
	case $1 in
	postgres) rm -f "$_svc_pg_data/postmaster.pid"; _pg_start "$_svc_pg_port" || ok=0 ;;
	redis) _redis_start "$_svc_redis_port" || ok=0 ;;
	versitygw) _s3_start "$_svc_s3_port" || ok=0 ;;
	esac
	if ((ok)); then
		log "$1: started again on the same URL for the next stage"
	else
		log "$1: could not start it again; later stages that need it will fail"
	fi
}

# services_summary: one line per helper that died during the run.
services_summary() {
	local d
	for d in "${_svc_deaths[@]}"; do log "helper died: $d"; done
	return 0
}

# stop_services: stop and delete the throwaway instances. Safe to call twice.
stop_services() {
	[[ -n $_svc_dir ]] || return 0
	if [[ ${LOCKSTEP_TEST_KEEP_SERVICES:-} == 1 ]]; then
		log "keeping throwaway services in $_svc_dir (LOCKSTEP_TEST_KEEP_SERVICES=1)"
		return 0
	fi
	if [[ -n $_svc_watch_pid ]]; then
		kill "$_svc_watch_pid" 2>/dev/null || true
		wait "$_svc_watch_pid" 2>/dev/null || true
		_svc_watch_pid=""
	fi
	# A helper that died and was not reported yet (the run was cut short)
	# keeps its log: never delete the only trace of why it died.
	services_check "the run" norevive || true
	local stopped=()
	if [[ -n $_svc_redis_pid ]]; then
		kill "$_svc_redis_pid" 2>/dev/null && stopped+=("redis pid $_svc_redis_pid")
		local i
		for i in $(seq 1 50); do kill -0 "$_svc_redis_pid" 2>/dev/null || break; sleep 0.1; done
		_svc_redis_pid=""
	fi
	if [[ -n $_svc_s3_pid ]]; then
		kill "$_svc_s3_pid" 2>/dev/null && stopped+=("versitygw pid $_svc_s3_pid")
		wait "$_svc_s3_pid" 2>/dev/null || true
		_svc_s3_pid=""
	fi
	if [[ -n $_svc_pg_data && -f $_svc_pg_data/postmaster.pid ]]; then
		_as_pg_user "$_svc_pg_bin/pg_ctl" -D "$_svc_pg_data" -m immediate -w stop >/dev/null 2>&1 &&
			stopped+=("postgres")
	fi
	rm -rf "$_svc_dir"
	((${#stopped[@]})) && log "stopped throwaway ${stopped[*]}; removed $_svc_dir"
	_svc_dir=""
	return 0
}
