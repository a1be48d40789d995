# One job per point: the driver runs the point's plan and writes its result only if the run is
# valid. The points on one server identity (of any recipe) share one warm stack. A checkpoint: a
# capacity search (capacity.smk) asks for its next probe only once the previous ones have results;
# for every other target it is a plain rule. On Slurm, a recipe's points use held_point below (its
# stack is a Slurm job of its own); only a recipe that reuses no stack submits a job per point.
PLAN_RESOURCES = KIT.plan_resources()


checkpoint point:
    input:
        unpack(KIT.point_inputs()),  # plan (and a dry run's marker of a damaged result)
    output:
        result=KIT.point_result(),
    log:
        paths.POINT_LOG,
    priority: KIT.stack_priority(False)
    conda:
        SW_ENV
    resources:
        **PLAN_RESOURCES,
        point_slots=1,
    shell:
        "servesweep run-point {input.plan:q} {output.result:q} 2>&1 | tee {log:q}"


if HELD:

    localrules:
        held_point,

    ruleorder: held_point > point

    # A point on a held stack (Slurm): it runs here, submits the stack's own job if none is up for
    # its servers, and runs its driver as a step of that job (servesweep/run/stacks/held.py).
    checkpoint held_point:
        input:
            unpack(KIT.point_inputs()),
        output:
            result=KIT.point_result(),
        log:
            paths.POINT_LOG,
        wildcard_constraints:
            recipe=KIT.held_recipe_pattern(),
        priority: KIT.stack_priority(False)
        conda:
            SW_ENV
        params:
            site=KIT.slurm_site,
        shell:
            "servesweep run-held-point {input.plan:q} {output.result:q} {params.site:q} 2>&1 | tee {log:q}"


# Rehearsal: the recipe's process layout, ports, env and readiness logic, with
# the engines replaced by the mocker on this host (durations capped), whatever the profile.
localrules:
    rehearse_point,


# A checkpoint for a halving sweep's rehearsed screens (KIT.halving_results).
checkpoint rehearse_point:
    input:
        plan=KIT.rehearsal_plan,
    output:
        result=paths.REHEARSAL_RESULT,
    log:
        paths.REHEARSAL_POINT_LOG,
    priority: KIT.stack_priority(True)
    conda:
        SW_ENV
    resources:
        point_slots=1,
    shell:
        "servesweep run-point {input.plan:q} {output.result:q} 2>&1 | tee {log:q}"
