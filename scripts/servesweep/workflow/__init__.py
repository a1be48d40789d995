"""What Snakemake asks, answered: the selection of recipes and points over render's pure recipe ->
plan step, which stacks their points share, capacity searches, staleness and its causes, the bill, and
every file the run reads from here (plans, sources, settings, curve files) written in one place."""
