"""Bad input: every case errors with file + field + reason, in the validator and in the dry run,
with no traceback, and nothing is rendered, submitted or written."""

from __future__ import annotations

import concurrent.futures as cf
import os
from pathlib import Path

import pytest

from servesweep.fileio.errors import InputError
from servesweep.render.cluster import all_clusters
from servesweep.render.loading import load_recipe, load_recipes
from servesweep.workflow import smk

from bad_inputs import CASES, write_cases
from helpers import RELIABILITY, copy_workflow, snakemake


def _lines_for(text: str, label: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip().startswith(label + ":")]


def _matches(case, lines) -> bool:
    return any(case.field in ln and case.reason.lower() in ln.lower() for ln in lines)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    wf = copy_workflow(tmp_path_factory.mktemp("bad") / "wf", recipes=[])
    cases = write_cases(wf / "recipes")
    return wf, cases


def test_corpus_is_large_enough():
    assert len(CASES) >= 40
    assert len({c.id for c in CASES}) == len(CASES)


def test_each_case_is_reported_by_the_validator(corpus):
    wf, cases = corpus
    clusters = all_clusters(wf / "profiles")
    failed = []
    for label, case in cases.items():
        _, problems = load_recipes([wf / label], clusters, root=wf)
        lines = [str(p) for p in problems]
        if not lines or not _matches(case, [ln for ln in lines if ln.startswith(label)]):
            failed.append(f"{case.id}: expected {case.field!r} / {case.reason!r}, got {lines}")
    assert not failed, "\n".join(failed)


def test_all_errors_reported_together_in_one_dry_run(corpus):
    wf, cases = corpus
    r = snakemake(wf, "-n", "results/summary.md")
    assert r.returncode != 0
    assert "Traceback" not in r.stderr + r.stdout
    missing = [c.id for label, c in cases.items() if not _matches(c, _lines_for(r.stderr, label))]
    assert not missing, f"not reported: {missing}\n{r.stderr[-3000:]}"
    assert not (wf / ".plans").exists()  # nothing rendered
    assert not (wf / "results").exists() or not list((wf / "results").glob("*"))  # nothing written


# A few cases also go through a real `snakemake -n` each (one per kind of failure: YAML, schema,
# meaning, launcher-owned flag, locked scenario, structure); every case goes through the same load
# in-process below, which is what the Snakefile runs at parse time.
REAL_DRY_RUNS = ("malformed-yaml", "unknown-top-key", "concurrency-duplicate", "vllm-kv-events-one-replica",
                 "agentx-too-short", "alias-bomb")  # fmt: skip


def _dry_run_one(case, tmp: Path):
    wf = copy_workflow(tmp / case.id, recipes=["local-agg-2x-mocker"])
    cases = write_cases_single(wf, case)
    r = snakemake(wf, "-n", "results/summary.md", timeout=120)
    label = next(iter(cases))
    ok = (
        r.returncode != 0
        and "Traceback" not in r.stdout + r.stderr
        and _matches(case, _lines_for(r.stderr, label))
        and not (wf / ".plans").exists()
        and not (wf / "results").exists()
    )
    return case.id, ok, r.stderr[-800:]


def write_cases_single(wf: Path, case):
    stem, text = case.render()
    (wf / "recipes" / f"{stem}.yaml").write_text(text)
    return {f"recipes/{stem}.yaml": case}


def _load_one(case, tmp: Path, capsys) -> tuple[str, bool, str]:
    """The Snakefile's parse-time load, in-process: a clean exit 2 naming file + field + reason, no
    other exception (a traceback), nothing rendered or written."""
    from servesweep.workflow.entry import load_or_exit

    wf = copy_workflow(tmp / case.id, recipes=["local-agg-2x-mocker"])
    label = next(iter(write_cases_single(wf, case)))
    capsys.readouterr()
    try:
        load_or_exit(wf, "local")
        code = 0
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    ok = code == 2 and _matches(case, _lines_for(err, label)) and not (wf / ".plans").exists()
    return case.id, ok and not (wf / "results").exists(), err[-800:]


def test_each_case_fails_its_own_load(tmp_path, capsys):
    outcomes = [_load_one(c, tmp_path, capsys) for c in CASES]
    bad = [f"{cid}:\n{err}" for cid, ok, err in outcomes if not ok]
    RELIABILITY["bad input (load)"] = [(cid, ok) for cid, ok, _ in outcomes]
    assert not bad, "\n".join(bad)


def test_some_cases_fail_their_own_dry_run(tmp_path):
    """One real `snakemake -n` per chosen case (two at a time): exits non-zero, names file+field+reason."""
    chosen = [c for c in CASES if c.id in REAL_DRY_RUNS]
    assert len(chosen) == len(REAL_DRY_RUNS)
    with cf.ThreadPoolExecutor(max_workers=2) as pool:
        outcomes = list(pool.map(lambda c: _dry_run_one(c, tmp_path), chosen))
    bad = [f"{cid}:\n{err}" for cid, ok, err in outcomes if not ok]
    RELIABILITY["bad input (dry run)"] = [(cid, ok) for cid, ok, _ in outcomes]
    assert not bad, "\n".join(bad)


def test_duplicate_recipe_names_are_rejected(tmp_path):
    src = Path(__file__).resolve().parents[1] / "recipes" / "local-agg-2x-mocker.yaml"
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    for d in (a, b):
        (d / src.name).write_text(src.read_text())
    clusters = all_clusters(Path(__file__).resolve().parents[1] / "profiles")
    recipes, problems = load_recipes([a / src.name, b / src.name], clusters)
    assert len(recipes) == 1
    assert any("already used by" in p.reason and p.field == "name" for p in problems)


def test_unknown_cluster_in_config_is_a_clean_error(wf):
    r = snakemake(wf, "-n", "--config", "cluster=nope")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "unknown cluster 'nope'" in r.stderr


def test_load_recipe_raises_input_error_not_traceback(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_text("name: x\n")
    with pytest.raises(InputError) as e:
        load_recipe(p)
    assert "required key is missing" in e.value.report()


def test_cluster_ports_must_stay_below_32768(tmp_path):
    from servesweep.render.cluster import load_cluster_file

    src = Path(__file__).resolve().parents[1] / "profiles" / "local" / "cluster.yaml"
    bad = tmp_path / "cluster.yaml"
    bad.write_text(src.read_text().replace("port_slots: 32", "port_slots: 64"))
    with pytest.raises(InputError) as e:
        load_cluster_file(bad, "profiles/x/cluster.yaml")
    assert "profiles/x/cluster.yaml: port_slots: port_base + port_slots x port_block reaches 40384" in e.value.report()


def test_fast_and_full_schema_validators_agree():
    """Valid documents are passed by the Rust validator alone, so it must reject every case the
    Python validator rejects (and pass every shipped recipe); the schemas are valid 2020-12."""
    import jsonschema
    import yaml

    from servesweep.fileio.yamlio import SCHEMA_DIR, fast_validator, schema, validator

    for path in SCHEMA_DIR.glob("*.schema.yaml"):
        jsonschema.Draft202012Validator.check_schema(schema(path.name))
    docs = [yaml.safe_load(p.read_text()) for p in (Path(__file__).resolve().parents[1] / "recipes").glob("*.yaml")]
    for c in CASES:
        if c.field == "(structure)" or c.reason in (".inf/.nan", "whole number"):  # inputguard's, before the schema
            continue
        try:
            docs.append(yaml.safe_load(c.render()[1]))
        except yaml.YAMLError:  # the malformed-YAML cases
            pass
    checked = 0
    for doc in docs:
        full = validator("recipe.schema.yaml").is_valid(doc)
        assert fast_validator("recipe.schema.yaml").is_valid(doc) == full, doc
        checked += 1
    assert checked > 50


def test_an_error_only_the_rust_validator_finds_is_still_reported():
    """Python's `$` matches before a trailing newline, Rust's does not: the stricter verdict wins."""
    import yaml

    from servesweep.fileio.yamlio import schema_problems, validator

    doc = yaml.safe_load((Path(__file__).resolve().parents[1] / "recipes" / "local-agg-2x-mocker.yaml").read_text())
    doc["name"] += "\n"
    assert validator("recipe.schema.yaml").is_valid(doc)
    problems = schema_problems(doc, "recipe.schema.yaml", "recipes/x.yaml")
    assert [(p.file, p.field) for p in problems] == [("recipes/x.yaml", "name")]
    assert "does not match" in problems[0].reason


def test_preflight_in_the_dry_run_names_a_missing_trace_and_eval_dataset(tmp_path):
    """What a point or an eval reads is checked before anything is submitted: a trace that does not
    exist, an MMLU subject the cluster's datasets cache does not hold (nothing is downloaded)."""
    wf = copy_workflow(tmp_path / "wf", recipes=["local-agg-2x-mocker"])
    f = wf / "recipes" / "local-agg-2x-mocker.yaml"
    text = f.read_text().replace("local-sessions.jsonl", "no-such-trace.jsonl")
    f.write_text(text.replace("tasks: [abstract_algebra]", "tasks: [anatomy]"))
    r = snakemake(wf, "-n", "results/summary.md")
    assert r.returncode != 0 and "Traceback" not in r.stdout + r.stderr
    assert (
        "recipes/local-agg-2x-mocker.yaml: scenario.dataset.trace.path: "
        "recipes/traces/no-such-trace.jsonl does not exist" in r.stderr
    )
    assert (
        "recipes/local-agg-2x-mocker.yaml: evals.mmlu: lighteval/mmlu (anatomy) is not in the datasets cache"
        in r.stderr
    )
    assert not (wf / ".plans").exists()


def _dry_run_refuses(wf, *args, says: str) -> None:
    r = snakemake(wf, "-n", "results/summary.md", *args, timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "Traceback" not in out and says in r.stderr, r.stderr[-2000:]
    assert not (wf / ".plans").exists()


def test_a_fifo_among_the_recipes_is_refused_not_read(tmp_path):
    """A FIFO named *.yaml would block the dry run forever if opened."""
    wf = copy_workflow(tmp_path / "wf", recipes=["local-agg-2x-mocker"])
    os.mkfifo(wf / "recipes" / "pipe.yaml")
    _dry_run_refuses(wf, says="recipes/pipe.yaml: not a regular file")
    RELIABILITY.setdefault("bad input (dry run)", []).append(("fifo-recipe", True))


@pytest.mark.parametrize(
    "old,new,says",
    [
        ("engine_python: .venvs/engine/bin/python", 'engine_python: ""', "engine_python: '' should be non-empty"),
        ("port_block: 256", "port_block: 8", "port_block: 8 is less than the minimum of 16"),
        ("port_base: 24000", "port_base: 24000.0", "port_base: must be a whole number"),
    ],
)
def test_bad_cluster_facts_are_named(tmp_path, old, new, says):
    wf = copy_workflow(tmp_path / "wf", recipes=["local-agg-2x-mocker"])
    facts = wf / "profiles/local/cluster.yaml"
    assert old in facts.read_text()
    facts.write_text(facts.read_text().replace(old, new))
    _dry_run_refuses(wf, says=f"profiles/local/cluster.yaml: {says}")
    RELIABILITY.setdefault("bad input (dry run)", []).append((f"cluster {new}", True))


def test_a_recipe_needing_more_ports_than_the_block_is_an_error_not_a_traceback():
    from helpers import servesweep

    r = servesweep("plan", "recipes/dsv4-pro-gb300-3p1d-pdep8-ddep16.yaml", "--cluster", "gb300")
    assert r.returncode == 0, r.stderr  # fits the real block
    from servesweep.render.cluster import all_clusters as clusters_of
    from servesweep.render.plan import render

    gb300 = clusters_of(Path(__file__).resolve().parents[1] / "profiles")["gb300"]
    recipe = load_recipe(Path(__file__).resolve().parents[1] / "recipes/dsv4-pro-gb300-3p1d-pdep8-ddep16.yaml")
    small = type(gb300)(**{**gb300.__dict__, "port_block": 16})
    with pytest.raises(InputError) as e:
        render(recipe, small, recipe.concurrency[0])
    assert "more than the cluster's port_block 16" in e.value.report()


def test_a_misspelled_config_key_is_an_error_with_the_suggestion(tmp_path):
    wf = copy_workflow(tmp_path / "wf", recipes=["local-agg-2x-mocker"])
    _dry_run_refuses(
        wf, "--config", "rehersal=1", says="--config: rehersal: unknown key 'rehersal' (did you mean 'rehearsal'?)"
    )
    RELIABILITY.setdefault("bad input (dry run)", []).append(("config-typo", True))


@pytest.mark.parametrize("value", ["soon", "-1", "1e9"])
def test_a_linger_that_is_not_seconds_is_refused(tmp_path, value):
    wf = copy_workflow(tmp_path / "wf", recipes=["local-agg-2x-mocker"])
    _dry_run_refuses(wf, "--config", f"linger_s={value}", says="--config: linger_s:")
    RELIABILITY.setdefault("bad input (dry run)", []).append((f"config-linger-{value}", True))


def test_a_broken_recipe_stops_only_the_runs_that_select_it(tmp_path, capsys):
    """`--config recipes=…` without the broken one: the run goes on and lists it; every recipe: a stop."""
    from servesweep.workflow.entry import load_or_exit

    wf = copy_workflow(tmp_path / "wf", recipes=["local-agg-2x-mocker"])
    (wf / "recipes" / "broken.yaml").write_text("name: broken\nclusters: !!binary aGVsbG8=\n")
    load_or_exit(wf, "local", ["local-agg-2x-mocker"])
    err = capsys.readouterr().err
    assert "warning: not selected and broken: recipes/broken.yaml: line 2" in err and "!!binary" in err
    assert (wf / ".plans" / "local-agg-2x-mocker").is_dir()
    with pytest.raises(SystemExit) as e:
        load_or_exit(wf, "local")
    assert e.value.code == 2 and "recipes/broken.yaml: line 2" in capsys.readouterr().err
    targets = lambda: smk.target_recipes(["-n", "results/local-agg-2x-mocker/c4.json"])  # noqa: E731
    load_or_exit(wf, "local", targeted=targets)  # the command line's targets name only the good one
    assert "warning: not selected and broken: recipes/broken.yaml: line 2" in capsys.readouterr().err
    for argv in (["results/summary.md"], [], ["results/local-agg-2x-mocker/c4.json", "all"]):
        assert smk.target_recipes(argv) is None, argv  # a target that may need every recipe


def test_a_symlinked_recipe_is_never_read_or_quoted(tmp_path):
    """A recipe that is a link (to a protected file, or to a good recipe) is refused unread: its
    content never reaches a message."""
    wf = copy_workflow(tmp_path / "wf", recipes=["local-agg-2x-mocker"])
    secret = tmp_path / "protected"
    secret.write_text("root-secret-line: x\nsecond-secret-line\n")
    secret.chmod(0o600)
    (wf / "recipes" / "stolen.yaml").symlink_to(secret)
    (wf / "recipes" / "alias.yaml").symlink_to(wf / "recipes" / "local-agg-2x-mocker.yaml")
    r = snakemake(wf, "-n")
    assert r.returncode == 2, r.stderr[-2000:]
    for name in ("stolen", "alias"):
        assert f"recipes/{name}.yaml: a symbolic link: never followed" in r.stderr
    assert "secret-line" not in r.stdout + r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize(
    ("config", "field", "reason"),
    [
        ({"rehearsal": "yes"}, "rehearsal", "is not a boolean"),
        ({"stack_reuse": 2}, "stack_reuse", "is not a boolean"),
        ({"partial": "../.."}, "partial", "is not a boolean"),
        ({"baseline": "/etc"}, "baseline", "is not a results folder"),
        ({"recipes": "a,b,a"}, "recipes", "listed more than once: a"),
        ({"linger_s": True}, "linger_s", "True is not a number of seconds"),  # a boolean is not a number
        ({"cluster": ["local"]}, "cluster", "is a list, not text"),
        ({"recipes": ["a"]}, "recipes", "is a list, not text"),
        ({"a;b": "1"}, "a;b", "unknown key 'a;b'"),
    ],
)
def test_config_values_are_typed_and_checked(config, field, reason, capsys):
    from servesweep.workflow.entry import check_config_or_exit

    with pytest.raises(SystemExit) as e:
        check_config_or_exit(config)
    assert e.value.code == 2 and f"--config: {field}: " in (err := capsys.readouterr().err) and reason in err


def test_good_config_values_pass(tmp_path):
    from servesweep.workflow.entry import check_config_or_exit

    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "c4.json").write_text("{}")
    check_config_or_exit(
        {"rehearsal": 1, "stack_reuse": "0", "partial": True, "baseline": str(tmp_path), "recipes": "a,b"}
    )
    assert (tmp_path / "r" / "c4.json").read_text() == "{}"  # a check reads nothing it need not
