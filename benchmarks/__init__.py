"""Benchmarks: our broker against RabbitMQ, measured side by side by amqbench (see docs/benchmarks.md)."""
