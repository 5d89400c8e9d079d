"""Searchers: what to try next. One interface, ``ask() -> Proposal | None`` and
``tell(proposal, verdict, value)``, for the built-in strategies and for external loops.

- :class:`CoordinateDescent`: one knob at a time, in the order given (the diagnosis's order),
  stepping to the neighbouring value up, then down; a "better" moves the incumbent there and
  keeps going that way; a full pass over the knobs without a win ends the search.
- :class:`TPE`: Optuna's Tree-structured Parzen Estimator over the space's values (seeded).
- :class:`RandomSearch`: configs drawn from the space without repeats (seeded), a baseline for
  the others.

Every searcher skips configs the space's constraints forbid and configs already judged, and a
config that failed is never proposed again (the campaign tells it as a failure).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from optimizer.hypotheses import hypothesis
from optimizer.space import Space, config_key

__all__ = ["Proposal", "Searcher", "CoordinateDescent", "TPE", "RandomSearch", "SEARCHERS"]


@dataclass(frozen=True)
class Proposal:
    config: dict[str, Any]  # the whole config to run (baseline plus the change)
    hypothesis: dict[str, Any] = field(default_factory=dict)  # optimizer.hypotheses.hypothesis

    token: Any = None  # the searcher's own handle (an Optuna trial)
    # "candidate", or "confirm": a config whose first run, told from outside, cleared the bar and
    # needs a second run on a fresh engine start (Campaign.ask / tell)
    role: str = "candidate"


class Searcher(Protocol):
    def ask(self) -> Proposal | None: ...

    def tell(self, proposal: Proposal, verdict: str, value: float | None) -> None: ...


Describe = Callable[[Mapping[str, Any], Mapping[str, Any]], dict]  # (incumbent, config) -> hypothesis


def _generic(base: Mapping[str, Any], config: Mapping[str, Any]) -> dict:
    return hypothesis(base, config)


class CoordinateDescent:
    """Proposals asked before the earlier ones are told (a campaign's parallel round) go further
    along the same knob and direction; a proposal carries its (knob, direction) line, and only a
    told result on the current line moves the search on. A "better" becomes the incumbent only
    when its value beats the incumbent's (``known`` holds the values told)."""

    def __init__(
        self, space: Space, start: Mapping[str, Any], order: list[str] | None = None, describe: Describe = _generic
    ) -> None:
        self.space = space
        self.incumbent = dict(start)
        self.order = order or space.names
        self.describe = describe
        self.tried: set[str] = {config_key(self.incumbent)}
        self.known: dict[str, float | None] = {}
        self._knob = 0  # index into order
        self._direction = 1  # +1 up, -1 down
        self._since_win = 0  # knobs visited since the last win

    def _current(self, name: str) -> Any:
        """The incumbent's value of ``name``: the knob's default where it leaves it out (the
        engine runs at it, so the search steps away from it rather than measuring it again)."""
        return self.incumbent.get(name, self.space.dimension(name).knob.default)

    def _neighbour(self, name: str, direction: int) -> dict[str, Any] | None:
        values = self.space.dimension(name).values
        current = self._current(name)
        i = values.index(current) if current in values else len(values) // 2
        j = i + direction if current in values else i
        while 0 <= j < len(values):
            config = {**self.incumbent, name: values[j]}
            if self.space.allows(config) and config_key(config) not in self.tried:
                return config
            j += direction
        return None

    def _next_line(self) -> None:
        if self._direction > 0:
            self._direction = -1
        else:
            self._direction = 1
            self._knob = (self._knob + 1) % len(self.order)
            self._since_win += 1

    def ask(self) -> Proposal | None:
        while self._since_win < len(self.order):
            config = self._neighbour(self.order[self._knob], self._direction)
            if config is not None:
                self.tried.add(config_key(config))
                return Proposal(config, self.describe(self.incumbent, config), token=(self._knob, self._direction))
            self._next_line()
        return None

    def tell(self, proposal: Proposal, verdict: str, value: float | None) -> None:
        key = config_key(proposal.config)
        self.tried.add(key)
        self.known[key] = None if verdict == "invalid" else value
        line = proposal.token or (self._knob, self._direction)
        best = self.known.get(config_key(self.incumbent))
        if verdict == "better" and value is not None and (best is None or value > best):
            name = self.order[line[0]]
            values = self.space.dimension(name).values
            old, new = self._current(name), proposal.config.get(name)
            up = old not in values or new not in values or values.index(new) > values.index(old)
            self.incumbent = dict(proposal.config)
            self._knob, self._direction = line[0], 1 if up else -1  # keep going the same way
            self._since_win = 0
        elif line == (self._knob, self._direction):
            self._next_line()


class RandomSearch:
    def __init__(self, space: Space, start: Mapping[str, Any], seed: int = 0, describe: Describe = _generic) -> None:
        self.start = dict(start)
        self.describe = describe
        configs = [{**self.start, **c} for c in space.grid()]
        random.Random(seed).shuffle(configs)
        seen = {config_key(self.start)}
        self._queue = []
        for c in configs:
            if config_key(c) not in seen:
                seen.add(config_key(c))
                self._queue.append(c)

    def ask(self) -> Proposal | None:
        if not self._queue:
            return None
        config = self._queue.pop()
        return Proposal(config, self.describe(self.start, config))

    def tell(self, proposal: Proposal, verdict: str, value: float | None) -> None:
        pass


class TPE:
    """Optuna's TPE sampler through its ask/tell interface; each knob is a categorical over the
    space's values. A proposal the constraints forbid, or one already judged, is told at once
    (a failure / its known value) and another is asked, up to ``max_redraws`` times."""

    def __init__(
        self, space: Space, start: Mapping[str, Any], seed: int = 0, max_redraws: int = 50, describe: Describe = _generic
    ) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.optuna = optuna
        self.space = space
        self.start = dict(start)
        self.describe = describe
        self.max_redraws = max_redraws
        self.known: dict[str, float | None] = {}
        self.study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
        self._index = {d.name: d.values for d in space.dimensions}
        first = {d.name: d.values.index(self.start[d.name]) for d in space.dimensions if self.start.get(d.name) in d.values}
        if len(first) == len(space.dimensions):
            self.study.enqueue_trial(first)  # the baseline first: the model starts from it

    def _config(self, trial) -> dict[str, Any]:
        picks = {name: values[trial.suggest_categorical(name, list(range(len(values))))] for name, values in self._index.items()}
        return {**self.start, **picks}

    def ask(self) -> Proposal | None:
        for _ in range(self.max_redraws):
            trial = self.study.ask()
            config = self._config(trial)
            key = config_key(config)
            if not self.space.allows(config):
                self.study.tell(trial, state=self.optuna.trial.TrialState.FAIL)
                continue
            if key in self.known:
                value = self.known[key]
                if value is None:
                    self.study.tell(trial, state=self.optuna.trial.TrialState.FAIL)
                else:
                    self.study.tell(trial, value)
                continue
            return Proposal(config, self.describe(self.start, config), token=trial)
        return None

    def tell(self, proposal: Proposal, verdict: str, value: float | None) -> None:
        self.known[config_key(proposal.config)] = None if verdict == "invalid" else value
        if proposal.token is None:
            return
        if verdict == "invalid" or value is None:
            self.study.tell(proposal.token, state=self.optuna.trial.TrialState.FAIL)
        else:
            self.study.tell(proposal.token, value)


SEARCHERS = {"coordinate": CoordinateDescent, "tpe": TPE, "random": RandomSearch}
