# Capacity at SLO: the highest concurrency a recipe holds within its SLO, decided from probes
# that are ordinary points (see capacity_probes in common.smk and servesweep/search.py).


rule capacity:
    input:
        settings=paths.CAPACITY_SETTINGS,  # bounds + SLO: an edit reruns this, not a probe
        probes=KIT.capacity_probes(checkpoints),
    output:
        capacity=report(
            paths.CAPACITY,
            caption="../report/capacity.rst",
            category="Capacity at SLO",
            labels={"recipe": "{recipe}"},
        ),
        plot=report(
            paths.CAPACITY_PLOT,
            caption="../report/capacity_plot.rst",
            category="Capacity at SLO",
            labels={"recipe": "{recipe}", "figure": "probes vs concurrency"},
        ),
    log:
        paths.CAPACITY_LOG,
    conda:
        SW_ENV
    shell:
        "servesweep capacity --settings {input.settings:q} --out {output.capacity:q} --plot {output.plot:q}"
        " {input.probes:q} 2> {log:q}"
