"""Allowlists, budgets and rate limits of keys and teams: checked before anything is called."""
