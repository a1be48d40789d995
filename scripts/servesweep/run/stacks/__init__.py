"""A server identity's stack, start to end, in one package. Layered, each module importing only those
above it: ``registry`` (the files, the state machine, ``current.json``), ``decide`` (join, start or
fail; stop), ``common`` (what warm and held stacks share: where they live, the curve hint, a new
stack's id and keeper argv), ``processes`` (one stack's processes), then ``warm`` (a point's view of
the run's warm stack), ``held`` (a Slurm held stack and its waits), ``held_step`` (a point as a step
of its job) and ``keeper`` (the process that owns a stack). Nothing here imports the package itself."""
