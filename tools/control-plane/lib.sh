# shellcheck shell=bash
# What `cp` and `cluster` share beyond tools/lib.sh (sourced here: messages, the lock, the
# processes they start and stop): the pinned version and the binaries built for it.
# Sourced after the script has set what tools/lib.sh reads (PROG, SELF, DIR, LOGS, TIMEOUT) and
# HERE, this directory. Nothing here runs on its own but reading version.env.

# shellcheck source=../lib.sh
source "$HERE/../lib.sh"
# shellcheck source-path=SCRIPTDIR source=version.env
source "$HERE/version.env"

bin_dir() { "$HERE/build.sh" --print; }
