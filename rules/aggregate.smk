# Cheap roll-ups, always run on the submitting host.
localrules:
    summary,
    capacity,
    rehearsal_summary,


rule summary:
    input:
        selection=sw.selection_file(CLUSTER),
        missing=sw.missing_file(CLUSTER),
        results=selected_results,
        capacity=selected_capacities,
    output:
        md=report(
            "results/summary.md", caption="../report/summary.rst", category="Summary"
        ),
        csv=report(
            "results/summary.csv", caption="../report/summary.rst", category="Summary"
        ),
        plots=report(
            directory("results/plots"),
            patterns=["{name}.png"],
            caption="../report/plots.rst",
            category="Plots",
        ),
    log:
        "logs/summary.log",
    conda:
        SW_ENV
    params:
        baseline=config.get("baseline", ""),
    shell:
        "servesweep summary --selection {input.selection:q} --out {output.md:q}"
        " --baseline={params.baseline:q} --capacity {input.capacity:q} -- {input.results:q} 2> {log:q}"


rule rehearsal_summary:
    input:
        selection=sw.selection_file(CLUSTER),
        missing=sw.missing_file(CLUSTER, rehearsal=True),
        results=[
            f"results/rehearsal/{p.recipe}/c{p.conc}.json" for p in SELECTION.points
        ],
    output:
        md="results/rehearsal/summary.md",
        csv="results/rehearsal/summary.csv",
    log:
        "logs/rehearsal/summary.log",
    conda:
        SW_ENV
    shell:
        "servesweep summary --selection {input.selection:q} --out {output.md:q}"
        " {input.results:q} 2> {log:q}"
