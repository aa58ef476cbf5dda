# shellcheck shell=bash
# What the repository's scripts share, in one vocabulary: messages, Debian packages, cargo's
# leftovers, and (for cp, cluster and registry) the lock and the processes they start and stop.
# Sourcing it only defines functions (and WAIT_POLL, which a script may set after).
#
# Read from the sourcing script:
#   PROG     what messages start with (cp, registry, dev, c/build.sh...)
#   SELF     the script whose header comment is its help (usage)
# and by the lock and process helpers:
#   DIR      the state directory: pid files live there, and an owned process names it
#   LOGS     where spawned processes log
#   TIMEOUT  seconds wait_for waits
#
# guests/lib.sh carries a copy of say, die and need_debian_packages for the projects
# `reconciler-host new` writes, which hold that file alone; tests/tests/scripts.rs keeps the copy
# the same as these.

# ---------------------------------------------------------------------------------------------
# Messages

say() { echo "$PROG: $*" >&2; }
die() {
  echo "$PROG: error: $*" >&2
  exit 1
}

# The header comment (line 2 up to `set -euo`) is the help.
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$SELF"; }

# ---------------------------------------------------------------------------------------------
# Packages and tools

# need_debian_packages [--no-recommends] WHO PACKAGE...: installs the missing ones with apt-get
# when root, else says how. --no-recommends leaves out what they only recommend (the cluster's
# buildah would bring a second OCI runtime).
need_debian_packages() {
  local recommends=() who missing=() package
  if [[ "$1" == --no-recommends ]]; then
    recommends=(--no-install-recommends)
    shift
  fi
  who=$1
  shift
  command -v dpkg-query >/dev/null || return 0 # not Debian: the tools must be on PATH
  for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
  done
  ((${#missing[@]})) || return 0
  if [[ "$(id -u)" != 0 ]]; then
    die "$who need ${missing[*]}; install them with: sudo apt-get install ${missing[*]}"
  fi
  say "installing ${missing[*]} (Debian)"
  # Tests run in parallel and two may install at once; apt refuses a second apt-get outright
  # ("Could not get lock"), so ours take turns and wait up to 10 minutes for anyone else's.
  if ! (
    flock 9
    apt-get -o DPkg::Lock::Timeout=600 update -qq &&
      DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
        "${recommends[@]}" "${missing[@]}" >/dev/null
  ) 9>/var/lock/reconciler-host-apt.lock; then
    die "apt-get could not install ${missing[*]}"
  fi
}

# forget_cargo_run_env: for scripts that run cargo and may themselves be run from a test or
# bench (./dev, guests/build.sh). Such a process inherits what cargo sets for a running target
# (CARGO_MANIFEST_DIR...); some build scripts (ring's) rerun when those change, which rebuilt the
# TLS stack on every switch between `cargo test` and a plain build. Unsets them.
forget_cargo_run_env() {
  local var
  for var in $(compgen -e | grep -E '^CARGO_(MANIFEST_|PKG_|BIN_EXE_|CRATE_NAME$|BIN_NAME$|PRIMARY_PACKAGE$|TARGET_TMPDIR$)' || true); do
    unset "$var"
  done
}

# ---------------------------------------------------------------------------------------------
# The lock, and the processes a script starts and stops (cp, cluster, registry)

# take_lock FILE SCOPE: one command at a time per SCOPE (cp, registry: per state directory;
# cluster: per machine). Says so when it has to wait. The lock is held on descriptor 9 until the
# script exits; whatever outlives the script (spawn) or runs beside it long (cluster's cp) gets
# 9>&-, or the lock would stay held by a server.
take_lock() {
  local file=$1 scope=$2
  mkdir -p "$(dirname "$file")"
  exec 9>"$file"
  if ! flock -n 9; then
    say "waiting for another $PROG command $scope (lock $file)"
    flock -w 900 9 || die "another $PROG command has held $file for 15 minutes; is it stuck?"
  fi
}

# alive PID: the process exists and is not a zombie awaiting its reaper.
alive() {
  local st
  [[ -r "/proc/$1/stat" ]] || return 1
  st=$(sed 's/^.*) \(.\).*/\1/' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ "$st" != Z ]]
}

# owned_pid NAME: prints the pid recorded for NAME if that process is alive and is ours (its
# command line names DIR), so a recycled pid is never signalled.
owned_pid() {
  local f="$DIR/$1.pid" pid
  [[ -f "$f" ]] || return 1
  pid=$(cat "$f")
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  alive "$pid" || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$DIR" || return 1
  echo "$pid"
}

# stop NAME [SIGNAL]: SIGTERM (or SIGNAL), then SIGKILL after 20 s.
stop() {
  local name=$1 sig=${2:-TERM} pid i
  if pid=$(owned_pid "$name"); then
    if [[ "$pid" != "$$" ]]; then
      kill -s "$sig" "$pid" 2>/dev/null || true
      for i in $(seq 200); do
        alive "$pid" || break
        [[ "$i" == 200 ]] && {
          say "$name (pid $pid) ignored SIG$sig for 20 s; killing it"
          kill -s KILL "$pid" 2>/dev/null || true
        }
        sleep 0.1
      done
      for _ in $(seq 50); do
        alive "$pid" || break
        sleep 0.1
      done
    fi
  fi
  rm -f "$DIR/$name.pid"
}

# spawn NAME CMD...: runs CMD in its own session (so a Ctrl-C aimed at the caller does not reach
# it and it outlives the command that started it, e.g. a `cp up` called from a test), detached
# from the caller's pipes and from the lock descriptor, logging to LOGS/NAME.log.
spawn() {
  local name=$1
  shift
  setsid "$@" </dev/null >>"$LOGS/$name.log" 2>&1 9>&- &
  echo $! >"$DIR/$name.pid"
}

# wait_for WHAT PROCESS CHECK: polls CHECK every WAIT_POLL seconds until it passes, PROCESS dies,
# or TIMEOUT passes. Returns 2 if the process died, 1 on timeout.
WAIT_POLL=0.2
wait_for() {
  local what=$1 name=$2 check=$3 deadline=$((SECONDS + TIMEOUT)) pid
  pid=$(cat "$DIR/$name.pid" 2>/dev/null) || pid=
  while ! $check; do
    # Liveness only: spawn recorded this pid a moment ago, so it is ours. owned_pid's command-line
    # check can read an empty /proc/PID/cmdline while setsid, env and the server exec in turn, and
    # once took a starting registry for dead (and then stopped it).
    if [[ -z "$pid" ]] || ! alive "$pid"; then
      say "$name exited while waiting for $what (log: $LOGS/$name.log)"
      return 2
    fi
    [[ "$SECONDS" -lt "$deadline" ]] || {
      say "timed out after ${TIMEOUT}s waiting for $what (logs in $LOGS)"
      return 1
    }
    sleep "$WAIT_POLL"
  done
}
