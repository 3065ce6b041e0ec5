"""The ``lossy-link`` nemesis: random packet loss and bandwidth limits between brokers.

Each fault draws (from the run's seeded RNG) a scope, ``one`` broker's links to every other
broker (both ways) or ``all`` links between brokers, and a shape:

- ``loss``: each packet a broker receives from a peer in scope is dropped with probability
  ``loss`` percent (2-35): an nftables rule ``ip saddr { peers } numgen random mod 100 < loss
  drop`` in an ``input`` chain of the receiving broker's namespace. Dropped on input, not on
  output: a packet dropped on output fails the sender's ``send``/``connect`` with EPERM at once,
  which TCP does not see on a lossy wire; dropped on input it is lost, and TCP retransmits.
  (``tc netem`` is not in this kernel; Jepsen's ``jepsen.net`` drops on input too.)
- ``rate``: what a broker sends to those peers goes through a token bucket of ``rate_kbit``
  kbit/s (256-4096): an HTB root qdisc on its ``eth0`` (the default class unlimited, so clients
  in the hub are not slowed), a class whose leaf is ``tc tbf rate ... latency 200ms`` (what does
  not fit in 200 ms of queue is dropped), and an nftables ``output`` rule ``ip daddr { peers }
  meta priority set 1:20`` that puts peer traffic in it (HTB honours ``skb->priority`` naming
  one of its classes, so no tc filter module is needed; the kernel here has htb and tbf, not
  prio or netem);
- ``both``.

The fault lasts ``duration`` s, then every table and qdisc is removed (also when aborted) and the
nemesis waits (at most ``REJOIN_TIMEOUT`` s) for one agreed view. Clients are never affected
(rules match broker addresses only). History events: ``lossy-link`` (scope, targets, shape, loss
percent, rate kbit/s), ``lossy-heal`` (``dropped``: packets the loss rules dropped,
``limited``: packets sent through the token bucket). Needs ``nft`` (Debian's nftables, interop_tests/setup.sh)
and ``tc`` (iproute2); :func:`unavailable_reason` says what is missing. Errors:
``netns.NetnsError`` (a command failed, with its stderr).
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
from dataclasses import dataclass

from .nemesis import NEMESES, Context, _await_rejoin
from .netns import NetnsError, Network

__all__ = ["Shape", "apply_shape", "clear_shape", "counts", "draw_shape", "lossy_link",
           "unavailable_reason"]

TABLE = "amqpf_lossy"
_COUNTER = re.compile(r"counter packets (\d+)")
#: Loss percent range and bandwidth choices (kbit/s) a fault draws from.
LOSS_RANGE = (2, 35)
RATES_KBIT = (256, 512, 1024, 2048, 4096)
SHAPES = ("loss", "rate", "both")


def unavailable_reason() -> str | None:
    """Why the nemesis cannot run here (None when it can): ``nft`` and ``tc``."""
    if shutil.which("nft") is None:
        return "nft is not installed (Debian's nftables: run interop_tests/setup.sh)"
    if shutil.which("tc") is None:
        return "tc (iproute2) is not installed"
    return None


@dataclass(frozen=True)
class Shape:
    """One fault: ``peers[i]`` the broker indexes whose traffic broker ``i`` loses / limits
    (brokers without an entry are left alone), ``loss`` percent (0: none), ``rate_kbit`` (0:
    unlimited)."""

    peers: dict[int, tuple[int, ...]]
    loss: int
    rate_kbit: int


def draw_shape(n: int, rng: random.Random) -> tuple[Shape, str, list[int], str]:
    """Draw a fault for ``n`` brokers: (shape, scope ``one``/``all``, target indexes, kind
    ``loss``/``rate``/``both``) as the module docstring describes."""
    kind = rng.choice(SHAPES)
    loss = rng.randint(*LOSS_RANGE) if kind in ("loss", "both") else 0
    rate = rng.choice(RATES_KBIT) if kind in ("rate", "both") else 0
    if rng.random() < 0.5:
        t = rng.randrange(n)
        others = tuple(i for i in range(n) if i != t)
        peers = {t: others, **{i: (t,) for i in others}}
        return Shape(peers, loss, rate), "one", [t], kind
    peers = {i: tuple(j for j in range(n) if j != i) for i in range(n)}
    return Shape(peers, loss, rate), "all", list(range(n)), kind


def _run(cmd: list[str], stdin: str | None = None, check: bool = True) -> None:
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=20)
    if check and proc.returncode != 0:
        raise NetnsError(f"{' '.join(cmd)}: {proc.stderr.strip() or proc.returncode}")


def _ruleset(peers: list[str], loss: int, rate_kbit: int) -> str:
    addresses = ", ".join(peers)
    rules = [f"table inet {TABLE} {{"]
    if loss:
        rules += ["  chain in {", "    type filter hook input priority 0; policy accept;",
                  f"    ip saddr {{ {addresses} }} numgen random mod 100 < {loss} counter drop",
                  "  }"]
    if rate_kbit:
        rules += ["  chain out {", "    type filter hook output priority 0; policy accept;",
                  f"    ip daddr {{ {addresses} }} counter meta priority set 1:20", "  }"]
    return "\n".join([*rules, "}", ""])


def apply_shape(net: Network, shape: Shape) -> None:
    """Install ``shape`` in the brokers' namespaces (see the module docstring). Raises
    ``NetnsError``; call :func:`clear_shape` after, also on failure."""
    for i, peers in sorted(shape.peers.items()):
        ns = net.hosts[i]
        if shape.rate_kbit:
            tc = ["tc", "-n", ns]
            _run([*tc, "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb",
                  "default", "10", "r2q", "1000000"])
            _run([*tc, "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:10",
                  "htb", "rate", "10gbit"])
            _run([*tc, "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:20",
                  "htb", "rate", "10gbit"])
            _run([*tc, "qdisc", "add", "dev", "eth0", "parent", "1:20", "handle", "20:", "tbf",
                  "rate", f"{shape.rate_kbit}kbit", "burst", "16kb", "latency", "200ms"])
        _run(["ip", "netns", "exec", ns, "nft", "-f", "-"],
             _ruleset([net.addresses[p] for p in peers], shape.loss, shape.rate_kbit))


def counts(net: Network, indexes: list[int]) -> dict[str, int]:
    """What the installed rules did so far, summed over brokers ``indexes``: ``dropped``
    (packets the loss rules dropped) and ``limited`` (packets put in the token bucket)."""
    out = {"dropped": 0, "limited": 0}
    for i in indexes:
        proc = subprocess.run(["ip", "netns", "exec", net.hosts[i], "nft", "list", "table",
                               "inet", TABLE], capture_output=True, text=True, timeout=20)
        for line in proc.stdout.splitlines():
            m = _COUNTER.search(line)
            if m:
                out["dropped" if line.rstrip().endswith("drop") else "limited"] += int(m[1])
    return out


def clear_shape(net: Network, indexes: list[int]) -> None:
    """Remove this module's nftables table and root qdisc from brokers ``indexes`` (whatever
    of them is there; never raises for what is missing)."""
    for i in indexes:
        ns = net.hosts[i]
        _run(["ip", "netns", "exec", ns, "nft", "delete", "table", "inet", TABLE], check=False)
        _run(["tc", "-n", ns, "qdisc", "del", "dev", "eth0", "root"], check=False)


def lossy_link(ctx: Context, duration: float) -> None:
    """Loss and/or a bandwidth limit on brokers' links (see the module docstring) for
    ``duration`` s, then removed; waits for one agreed view."""
    n = len(ctx.brokers)
    shape, scope, targets, kind = draw_shape(n, ctx.rng)
    names = [ctx.brokers[i].name for i in targets]
    try:
        apply_shape(ctx.net, shape)
        ctx.record("lossy-link", scope=scope, targets=names, shape=kind, loss=shape.loss,
                   rate_kbit=shape.rate_kbit)
        ctx.sleep(duration)
    finally:
        did = counts(ctx.net, sorted(shape.peers))
        clear_shape(ctx.net, list(range(n)))
        ctx.record("lossy-heal", targets=names, **did)
    _await_rejoin(ctx, ",".join(names))


NEMESES["lossy-link"] = lossy_link
