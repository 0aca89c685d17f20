"""The request pipeline: preparing a prompt (shared by completions and replay), then calling."""
