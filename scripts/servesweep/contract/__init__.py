"""What render, run and report agree on: the typed plan, every file path, the figures, and the
heartbeat protocol (the warm-stack protocol is the run side's alone: ``run/stacks``)."""
