"""The `genai` command: the root group in main.py, one module per command group beside it."""
