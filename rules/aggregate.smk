# Cheap roll-ups, always run on the submitting host.
localrules:
    summary,
    capacity,
    rehearsal_summary,


rule summary:
    input:
        selection=paths.selection_file(CLUSTER),
        missing=paths.missing_file(CLUSTER, rehearsal=False),
        results=KIT.selected_results,
        swept=KIT.halving_results(checkpoints, RUN_FILES),  # after a halving sweep's screens
        trials=KIT.search_results(RUN_FILES),  # a search's trials chosen so far
        trial_gate=KIT.search_gate(checkpoints),  # the current round, as checkpoints
        capacity=KIT.selected_capacities,
        evals=KIT.selected_evals,
    output:
        md=report(
            str(paths.SUMMARY_MD), caption="../report/summary.rst", category="Summary"
        ),
        csv=report(
            str(paths.SUMMARY_CSV), caption="../report/summary.rst", category="Summary"
        ),
        plots=report(
            directory(str(paths.plots_dir())),
            patterns=["{name}.png"],
            caption="../report/plots.rst",
            category="Plots",
        ),
    log:
        paths.SUMMARY_LOG,
    conda:
        SW_ENV
    params:
        baseline=config.get("baseline", ""),
    shell:
        "servesweep summary --selection {input.selection:q} --out {output.md:q}"
        " --baseline={params.baseline:q} --capacity {input.capacity:q} --evals {input.evals:q}"
        " -- {input.results:q} {input.swept:q} {input.trials:q} 2> {log:q}"


rule rehearsal_summary:
    input:
        selection=paths.selection_file(CLUSTER),
        missing=paths.missing_file(CLUSTER, rehearsal=True),
        results=KIT.rehearsal_results(),
        swept=KIT.halving_results(checkpoints, RUN_FILES),
        trials=KIT.search_results(RUN_FILES),
        trial_gate=KIT.search_gate(checkpoints),
    output:
        md=str(paths.REHEARSAL_SUMMARY_MD),
        csv=str(paths.REHEARSAL_SUMMARY_CSV),
    log:
        paths.REHEARSAL_SUMMARY_LOG,
    conda:
        SW_ENV
    shell:
        "servesweep summary --selection {input.selection:q} --out {output.md:q}"
        " {input.results:q} {input.swept:q} {input.trials:q} 2> {log:q}"
