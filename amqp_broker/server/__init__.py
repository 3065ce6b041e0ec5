"""The I/O edge, the only anyio code of the broker: TCP listener, a reader and a writer task per
connection, the periodic tick, and the memory watch."""
