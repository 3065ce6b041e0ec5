#!/usr/bin/env bash
# Install the non-Python clients used by interop_tests/ (run by `make test`):
#   - Debian's amqp-tools (rabbitmq-c command-line clients) for test_amqp_tools.py
#   - nodejs/npm and the pinned amqplib (interop_tests/node) for test_node_amqplib.py
#   - Debian's rabbitmq-server, the broker the differential tests compare with
#   - prometheus (promtool, and the server test_dashboards.py scrapes with), chromium and
#     chromium-driver for test_management.py
#   - fuse3 (libfuse3, fusermount3) for the fault harness's power-loss file system
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

# Management tests (issue 13): promtool (Debian's prometheus) checks /metrics; headless Chromium
# (driven by Playwright's client, no browser download) renders the web page.
if ! command -v promtool >/dev/null 2>&1; then
    log "installing prometheus (promtool)"
    apt_install prometheus
fi
if ! command -v chromium >/dev/null 2>&1; then
    log "installing chromium and chromium-driver"
    apt_install chromium chromium-driver
fi

# RabbitMQ 3.10 (Debian's package): the differential tests start a private node of it
# (interop_tests/rabbitmq_node.py) and expect the same outcome from it as from our broker.
# Debian's policy-rc.d keeps the package's own service from starting; if a service did start on
# 5672 it would take `make run`'s port, so it is stopped.
if [ ! -x /usr/sbin/rabbitmq-server ] && [ ! -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
    log "installing rabbitmq-server"
    apt_install rabbitmq-server
    if command -v invoke-rc.d >/dev/null 2>&1; then
        $SUDO invoke-rc.d rabbitmq-server stop >/dev/null 2>&1 || true
    fi
fi

# Fault harness power-loss nemesis (interop_tests/faults/lazyfs.py): libfuse3 and fusermount3;
# the Python side is PyPI's mfusepy (pyproject's test extra), ctypes over this libfuse3.
if ! command -v fusermount3 >/dev/null 2>&1; then
    log "installing fuse3"
    apt_install fuse3
fi

# Fault harness lossy-link nemesis (interop_tests/faults/lossy.py): nft's `numgen random` drop
# rules inside the brokers' namespaces (tc netem is not in every kernel; tc tbf is iproute2's).
if ! command -v nft >/dev/null 2>&1; then
    log "installing nftables"
    apt_install nftables
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
