# Capacity at SLO: the highest concurrency a recipe holds within its SLO, decided from probes
# that are ordinary points (capacity_probes in servesweep/workflow/rulekit.py, servesweep/capacity/search.py).


localrules:
    probe_plan,


# The plan of a probe a checkpoint decided mid-run outside the recipe's concurrencies (every other
# plan is written before the DAG is built).
rule probe_plan:
    output:
        plan=paths.PROBE_PLAN,
    log:
        paths.PROBE_PLAN_LOG,
    conda:
        SW_ENV
    params:
        recipe=KIT.recipe_source,
        cluster=CLUSTER,
    shell:
        "servesweep plan {params.recipe:q} --cluster {params.cluster:q} --conc {wildcards.conc}"
        " --variant {wildcards.recipe:q} --out {output.plan:q} 2> {log:q}"


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
    params:
        curve=KIT.capacity_curve,  # the search's stack stops waiting for probes
    shell:
        "servesweep capacity --settings {input.settings:q} --out {output.capacity:q} --plot {output.plot:q}"
        " --curve {params.curve:q} --recipe {wildcards.recipe:q} {input.probes:q} 2> {log:q}"
