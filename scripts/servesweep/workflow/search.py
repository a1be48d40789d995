"""Model-based search for a sweep too big to run in full (render/sweep, strategy: search).

optuna's TPE sampler chooses each round's variants (``batch`` at a time) from the scores of the
trials before it; a trial is a variant measured in full, scored on its target point (SLO met: its
total tok/s per GPU; missed: minus the largest share of an SLO limit used). The search is replayed
from the results on disk whenever it is asked: the same scores and seed choose the same variants,
so every trial is an ordinary file target and a resumed search reruns nothing it has. Only the
variants chosen ever start a stack."""

from __future__ import annotations

import math
import random
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..render.sweep import SEARCH_DEFAULTS, search_startup
from .halving import Screened, screened

# proposals the sampler scores per trial (optuna's default 24): a space of a few dozen variants is then
# nearly all scored; on a known 3 x 3 space 4 trials found the best for 27 of 30 seeds (24: 25)
EI_CANDIDATES = 64
WAITS = "waits for the search"
UNMEASURED = -1e9  # the score of a missed SLO whose limited figure was not measured


@dataclass(frozen=True)
class Replay:
    history: tuple[tuple[str, float | None], ...]  # (variant, score) in trial order; None: cannot be scored
    waiting: tuple[str, ...]  # this round's variants without a current result
    chosen: tuple[str, ...]  # every variant chosen so far, this round's included

    @property
    def done(self) -> bool:
        return not self.waiting


def score(s: Screened) -> float | None:
    """Higher is better; None for a result its marks leave unjudged (a starved client decides nothing)."""
    if s.unjudged:
        return None
    if s.met:
        return s.tps
    return -s.worst if math.isfinite(s.worst) else UNMEASURED


class Space:
    """The sweep's variants as the sampler's parameters: one per group of axes (a link moves its axes
    together), an integer rank where the group's values are numbers, else a choice among labels."""

    def __init__(self, info: dict, names: list[str]):
        self.groups = info["groups"]
        self.labels = {g["axes"][0]: info["axes"][g["axes"][0]]["labels"] for g in self.groups}
        self.unordered = {g["axes"][0] for g in self.groups if not g["rank"]}  # groups chosen among labels
        self.names = names  # grid order
        self.by_params = {self._key(self.params_of_choice(info["variants"][n])): n for n in names}
        self.params = {n: self.params_of_choice(info["variants"][n]) for n in names}

    def params_of_choice(self, choice: dict) -> dict:
        out = {}
        for g in self.groups:
            axis = g["axes"][0]
            i = self.labels[axis].index(choice[axis])
            out[axis] = g["rank"][i] if g["rank"] else choice[axis]
        return out

    @staticmethod
    def _key(params: dict) -> tuple:
        return tuple(sorted(params.items()))

    def startup(self, spec: dict) -> int:
        """The balanced start's trials: enough for every label of the largest unordered axis."""
        return search_startup(spec, max((len(self.labels[a]) for a in self.unordered), default=0))

    def distributions(self) -> dict:
        from optuna.distributions import CategoricalDistribution, IntDistribution

        return {
            g["axes"][0]: IntDistribution(0, len(g["rank"]) - 1)
            if g["rank"]
            else CategoricalDistribution(self.labels[g["axes"][0]])
            for g in self.groups
        }

    def variant(self, params: dict) -> str | None:
        """The variant these parameters name (None: an excluded or unselected combination)."""
        return self.by_params.get(self._key(params))

    def nearest(self, params: dict, untried: list[str]) -> str:
        """The untried variant closest to ``params`` (fewest groups changed, then the least rank moved),
        in grid order among equals."""

        def distance(name: str) -> tuple:
            b = self.params[name]
            moved = [abs(v - b[k]) if isinstance(v, int) else int(v != b[k]) for k, v in params.items()]
            return (sum(m > 0 for m in moved), sum(moved))

        return min(untried, key=lambda n: (distance(n), self.names.index(n)))

    def balanced(self, tried: set[str], untried: list[str], rng: random.Random) -> str:
        """The untried variant with the most axis values no trial has had yet, drawn among equals: a
        start that tries every value of a two-valued axis (TPE's random start may try one layout only,
        and its model then rarely proposes a value it has never scored)."""
        seen = {(g, v) for n in tried for g, v in self.params[n].items()}

        def fresh(name: str) -> tuple[int, int]:  # new labels first: an excluded corner cannot hide one
            new = [g for g, v in self.params[name].items() if (g, v) not in seen]
            return sum(g in self.unordered for g in new), len(new)

        most = max(map(fresh, untried))
        return rng.choice([n for n in untried if fresh(n) == most])


def settings(info: dict) -> dict:
    return {**SEARCH_DEFAULTS, **info["search"]}


def suggest(space: Space, spec: dict, history: list, k: int) -> list[str]:
    """The next ``k`` variants to try, given the trials so far (deterministic: seeded per round)."""
    import optuna  # only a search pays its import

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    startup = space.startup(spec)
    # the start lasts while TPE itself would still draw at random: it counts scored trials only
    starting = sum(v is not None for _, v in history) < startup
    with warnings.catch_warnings():  # multivariate is marked experimental; it models the axes jointly
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(
            seed=(spec["seed"] + len(history)) % 2**32,
            n_startup_trials=startup,
            n_ei_candidates=EI_CANDIDATES,
            multivariate=True,
            constant_liar=True,
        )
    study = optuna.create_study(direction="maximize", sampler=sampler)
    dists, states = space.distributions(), optuna.trial.TrialState
    for name, value in history:
        state = states.COMPLETE if value is not None else states.FAIL
        trial = optuna.trial.create_trial(params=space.params[name], distributions=dists, value=value, state=state)
        study.add_trial(trial)
    chosen: list[str] = []
    for _ in range(k):
        tried = {h for h, _ in history} | set(chosen)
        untried = [n for n in space.names if n not in tried]
        if starting:
            pick = space.balanced(tried, untried, random.Random(f"{spec['seed']}:{len(tried)}"))
            study.enqueue_trial(space.params[pick])  # asked next: pending, as TPE's own picks are
        trial = study.ask(dists)  # left pending: the constant liar spreads the rest of the batch
        name = space.variant(trial.params)
        # a proposal measured before (or excluded) says the model is sure of that corner: its nearest
        # untried neighbour is the next step (asking again until a new one came was no better on the
        # known 3 x 3 space, and slower)
        chosen.append(name if name in untried else space.nearest(trial.params, untried))
    return chosen


def replay(root: Path, variants: list, rehearsal: bool = False, plan_of=None) -> Replay:
    """The search so far, from the variants' current results (``plan_of``: (recipe, conc) -> the plan
    fingerprint a result must carry to count)."""
    info = variants[0].sweep
    spec, by_name = settings(info), {r.name: r for r in variants}
    space, target = Space(info, [r.name for r in variants]), spec["target"]
    trials = min(spec["trials"], len(variants))
    history: list[tuple[str, float | None]] = []
    while len(history) < trials:
        batch = suggest(space, spec, history, min(spec["batch"], trials - len(history)))
        found = [screened(root, by_name[n], target, rehearsal, plan_of(n, target) if plan_of else None) for n in batch]
        waiting = tuple(n for n, f in zip(batch, found, strict=True) if f is None)
        if waiting:
            return Replay(tuple(history), waiting, tuple([n for n, _ in history] + batch))
        history += [(n, score(f)) for n, f in zip(batch, found, strict=True)]
    return Replay(tuple(history), (), tuple(n for n, _ in history))


def not_tried(variants: list, rep: Replay) -> dict[str, str]:
    """Variant -> why it is not measured: not chosen by a finished search, or waiting for one."""
    spec = settings(variants[0].sweep)
    said = f"a balanced start, then optuna TPE, seed {spec['seed']}"
    if rep.done:
        why = f"not tried by the search ({len(rep.history)} trials of {len(variants)} variants, {said})"
    else:
        why = f"{WAITS} ({len(rep.history)} of {min(spec['trials'], len(variants))} trials scored, {said})"
    return {r.name: why for r in variants if r.name not in rep.chosen}
