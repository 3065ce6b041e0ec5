#!/usr/bin/env bash
# Install the non-Python clients used by interop_tests/ (run by `make test`):
#   - Debian's amqp-tools (rabbitmq-c command-line clients) for test_amqp_tools.py
#   - nodejs/npm and the pinned amqplib (interop_tests/node) for test_node_amqplib.py
# Idempotent and fast (< 1 s) when everything is already there.  Needs root (or
# passwordless sudo) only when a Debian package is missing.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NODE_DIR="$HERE/node"

log() { echo "interop_tests/setup.sh: $*" >&2; }

SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then
    SUDO="sudo -n"
fi

APT_UPDATED=0
apt_install() {
    # Install Debian packages; refresh the package lists only if the first try fails.
    if ! command -v apt-get >/dev/null 2>&1; then
        log "apt-get not available; cannot install $*"
        return 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    if ! $SUDO apt-get install -y --no-install-recommends "$@"; then
        if [ "$APT_UPDATED" -eq 0 ]; then
            log "apt-get install $* failed; running apt-get update and retrying"
            $SUDO apt-get update
            APT_UPDATED=1
        fi
        $SUDO apt-get install -y --no-install-recommends "$@"
    fi
}

if ! command -v amqp-publish >/dev/null 2>&1; then
    log "installing amqp-tools"
    apt_install amqp-tools
fi

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    log "installing nodejs and npm"
    apt_install nodejs npm
fi

if [ ! -d "$NODE_DIR/node_modules/amqplib" ]; then
    log "installing amqplib into $NODE_DIR/node_modules"
    cd "$NODE_DIR"
    if [ -f package-lock.json ]; then
        npm ci --no-audit --no-fund --loglevel=error
    else
        npm install --no-audit --no-fund --loglevel=error
    fi
fi
