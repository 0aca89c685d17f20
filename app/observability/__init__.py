"""What operators see: metrics (every label from a bounded set), traces, structured logs, and
readiness (/readyz)."""
