"""How much runs at once and where: concurrency limits with a bounded line (limits.py), and when
work that grows with the input leaves the event loop (offload.py)."""
