"""Tests of the server layer (listener tasks)."""
