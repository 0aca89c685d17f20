"""The audit trail: durable, redacted job records; replay and drift detection over them."""
