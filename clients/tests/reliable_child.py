"""Child process for the reliable tests: ``python -m clients.tests.reliable_child URI STATE MODE``.

MODE ``kill``: put one message and SIGKILL itself right after the frames were written, before
the confirm was read (the message may or may not reach the broker: unread input makes the kernel
reset the socket). MODE ``kill-late``: the same, but 0.5 s later, so the broker surely routed it
and only its confirm is lost. MODE ``resume``: open the client (which finishes the logged puts) and print
how many it resumed.
"""

import os
import signal
import sys
import time

import anyio

from clients.reliable import ReliableClient


async def main(uri: str, state: str, mode: str, exchange: str) -> None:
    async with ReliableClient(uri, client_id="child", state_path=state, exchange=exchange,
                              operation_timeout=10) as rc:
        if mode.startswith("kill"):
            def die() -> None:
                if mode == "kill-late":
                    time.sleep(0.5)  # blocks the loop on purpose: the confirm stays unread
                os.kill(os.getpid(), signal.SIGKILL)
            rc._after_send = die
            await rc.put("jobs.x", b"payload", message_id="fixed-id-1")
        print("resumed", rc.resumed, flush=True)


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:5])
