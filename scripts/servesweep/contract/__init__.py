"""What render, run and report agree on: the typed plan, every file path, the figures, and the
warm-stack and heartbeat protocols."""
