# servesweep: one target per benchmark point, results/<recipe>/c<conc>.json,
# rolled up into results/summary.md. All logic lives in scripts/servesweep.
import sys
from pathlib import Path

from snakemake import __version__ as SNAKEMAKE_VERSION

sys.path.insert(0, str(Path(workflow.basedir) / "scripts"))
from servesweep.workflow.smk import require_supported

require_supported(
    SNAKEMAKE_VERSION
)  # Snakemake internals are read in one adapter (workflow/smk.py)


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/points.smk"
include: "rules/capacity.smk"
include: "rules/checks.smk"
include: "rules/aggregate.smk"


# The warm stacks' curve files: written once the DAG is final (a cluster job's snakemake writes none).
onstart:
    if RUN_FILES:
        RUN_FILES.start_running(*smk.jobs_to_run(workflow))


rule all:
    default_target: True
    input:
        str(paths.SUMMARY_MD),
