"""Helpers for tests and benchmarks only (in-process topologies, fixtures); the library never imports this."""
