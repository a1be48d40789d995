"""Run side: plan -> processes -> result. Imports nothing from render: the plan contract is the seam."""
