"""Benchmarks: they report figures and never assert timings (see bench/README.md)."""
