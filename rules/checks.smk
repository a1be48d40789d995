# Checks of what a stack answers, beside how fast: the API smoke (servesweep/run/smoke.py) runs the
# project's fixed request set, an eval (servesweep/run/evals.py) one of the recipe's accuracy
# benchmarks through aiperf. Each is one more turn on the recipe's stack after its points (no engine
# start of its own when the points run in the same snakemake run). A check follows the smoke point's
# plan and its own settings: an edit of the request set or of an evals entry reruns only checks.


CHECK_RESOURCES = KIT.plan_resources(check=True)


rule smoke:
    input:
        plan=KIT.smoke_plan(),
        requests=paths.SMOKE_REQUESTS,
    output:
        smoke=paths.SMOKE,
    log:
        paths.SMOKE_LOG,
    priority: KIT.check_priority()
    conda:
        SW_ENV
    resources:
        **CHECK_RESOURCES,
        point_slots=1,
    shell:
        "servesweep run-smoke {input.plan:q} {input.requests:q} {output.smoke:q} 2>&1 | tee {log:q}"


rule eval:
    input:
        plan=KIT.smoke_plan(),
        settings=paths.EVAL_SETTINGS,
    output:
        evaluation=paths.EVAL,
    log:
        paths.EVAL_LOG,
    priority: KIT.check_priority()
    conda:
        SW_ENV
    resources:
        **CHECK_RESOURCES,
        point_slots=1,
    shell:
        "servesweep run-eval {input.plan:q} {input.settings:q} {output.evaluation:q} 2>&1 | tee {log:q}"


if HELD:

    localrules:
        held_smoke,
        held_eval,

    ruleorder: held_smoke > smoke
    ruleorder: held_eval > eval

    # A check of a recipe whose stack is held (Slurm): a step of that stack's job, as its points are.
    rule held_smoke:
        input:
            plan=KIT.smoke_plan(),
            requests=paths.SMOKE_REQUESTS,
        output:
            smoke=paths.SMOKE,
        log:
            paths.SMOKE_LOG,
        wildcard_constraints:
            recipe=KIT.held_recipe_pattern(),
        priority: KIT.check_priority()
        conda:
            SW_ENV
        params:
            site=KIT.slurm_site,
        shell:
            "servesweep run-held-check smoke {input.plan:q} {input.requests:q} {output.smoke:q} {params.site:q}"
            " 2>&1 | tee {log:q}"

    rule held_eval:
        input:
            plan=KIT.smoke_plan(),
            settings=paths.EVAL_SETTINGS,
        output:
            evaluation=paths.EVAL,
        log:
            paths.EVAL_LOG,
        wildcard_constraints:
            recipe=KIT.held_recipe_pattern(),
        priority: KIT.check_priority()
        conda:
            SW_ENV
        params:
            site=KIT.slurm_site,
        shell:
            "servesweep run-held-check eval {input.plan:q} {input.settings:q} {output.evaluation:q} {params.site:q}"
            " 2>&1 | tee {log:q}"


# An engine profile (servesweep/run/profile.py): a turn on the recipe's stack, whose engines start with
# the profiler idle (render/profiling; or a stack of its own, profile.stack own), a short load of its
# own, each role's traces and an index. Its own target, never a point's figures.
rule profile:
    input:
        plan=KIT.profile_input(paths.PROFILE_PLAN),
        settings=KIT.profile_input(paths.PROFILE_SETTINGS),
    output:
        profile=directory(paths.PROFILE),
    log:
        paths.PROFILE_LOG,
    priority: KIT.check_priority()
    conda:
        SW_ENV
    resources:
        **KIT.plan_resources(check=True, smoke_point=True),  # the stack's shape: the same at any concurrency
        point_slots=1,
    shell:
        "servesweep run-profile {input.plan:q} {input.settings:q} {output.profile:q} 2>&1 | tee {log:q}"


if HELD:

    localrules:
        held_profile,

    ruleorder: held_profile > profile

    # A profile sharing a held stack (Slurm): a step of that stack's job, as its points are.
    rule held_profile:
        input:
            plan=KIT.profile_input(paths.PROFILE_PLAN),
            settings=KIT.profile_input(paths.PROFILE_SETTINGS),
        output:
            profile=directory(paths.PROFILE),
        log:
            paths.PROFILE_LOG,
        wildcard_constraints:
            recipe=KIT.held_profile_pattern(),
        priority: KIT.check_priority()
        conda:
            SW_ENV
        params:
            site=KIT.slurm_site,
        shell:
            "servesweep run-held-check profile {input.plan:q} {input.settings:q} {output.profile:q} {params.site:q}"
            " 2>&1 | tee {log:q}"
