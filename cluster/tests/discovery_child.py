"""Run inside ``unshare -rn`` (a private network namespace, ``lo`` up): three brokers on 127.0.0.1,
127.0.0.2 and 127.0.0.3 announce themselves, two in cluster "blue", one in "red"; prints one JSON
object with what each saw and how long discovery took (seconds, monotonic clock)."""

from __future__ import annotations

import json
import threading
import time

from cluster.discovery import MdnsDiscovery, Peer


def main() -> None:
    seen: dict[str, float] = {}
    t0 = time.monotonic()

    def on_a(peers: dict[str, Peer]) -> None:
        for node in peers:
            seen.setdefault(node, time.monotonic())

    a = MdnsDiscovery("blue", "node-a", "127.0.0.1", 5672, "0.1.0", on_change=on_a)
    b = MdnsDiscovery("blue", "node-b", "127.0.0.2", 5673, "0.1.0")
    red = MdnsDiscovery("red", "node-r", "127.0.0.3", 5674, "0.1.0")
    a.start()                 # a is up and browsing before b starts
    t_b = time.monotonic()
    threads = [threading.Thread(target=d.start) for d in (b, red)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t_b_registered = time.monotonic()
    deadline = time.monotonic() + 10
    while "node-b" not in seen and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.5)           # let red's announcement arrive too, if it were to leak across
    b_view = b.peers()
    a_view = a.peers()
    t_bye = time.monotonic()
    b.close()
    while "node-b" in a.peers() and time.monotonic() < t_bye + 5:
        time.sleep(0.01)
    gone = time.monotonic() - t_bye
    result = {
        "a_saw": {n: [p.address, p.version] for n, p in a_view.items()},
        "b_saw": sorted(b_view),
        "discovery_s": round(seen.get("node-b", float("nan")) - t_b, 3),
        "registration_s": round(t_b_registered - t_b, 3),
        "after_registration_s": round(seen.get("node-b", float("nan")) - t_b_registered, 3),
        "goodbye_s": round(gone, 3),
        "a_after_goodbye": sorted(a.peers()),
        "total_s": round(time.monotonic() - t0, 3),
    }
    red.close()
    a.close()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
