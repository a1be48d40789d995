# Checks of what a stack answers, beside how fast (servesweep/run/smoke.py): the API smoke runs the
# project's fixed request set on the recipe's stack, as one more turn after its points (no engine
# start of its own when the points run in the same snakemake run). It follows the smoke point's plan
# and the request set: an edit of the request set reruns only the smokes.


rule smoke:
    input:
        plan=smoke_plan,
        requests=paths.SMOKE_REQUESTS,
    output:
        smoke=paths.SMOKE,
    log:
        paths.SMOKE_LOG,
    priority: check_priority()
    group:
        stack_group("stack")
    conda:
        SW_ENV
    resources:
        **PLAN_RESOURCES,
        point_slots=1,
    shell:
        "servesweep run-smoke {input.plan:q} {input.requests:q} {output.smoke:q} 2>&1 | tee {log:q}"
