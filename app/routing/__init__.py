"""Which model answers, and how patiently: ModelSelectionPolicy and the retry policy."""
