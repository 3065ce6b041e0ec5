"""Tests of the fault-injection harness: the pure parts, and short runs of every nemesis."""
