"""amqp-broker: an AMQP 0-9-1 message broker.

Layers (DESIGN.md §2): ``protocol`` (sans-IO codec) <- ``core`` (broker logic, no sockets) <-
``server`` (anyio I/O edge); ``app`` composes them and ``__main__`` is the command line.
"""

__version__ = "0.1.0"
