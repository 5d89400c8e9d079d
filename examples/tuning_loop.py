"""Another tuning loop (an agent, a script of your own) driving the optimizer as a library, both ways.

1. The campaign measures: the loop proposes its own configs with its own hypotheses, then takes
   the built-in searcher's; the campaign starts the engine afresh for each measurement, checks
   that a lossless change answers a greedy sample as the baseline did, judges it against the
   baseline's noise floor (a win must repeat on a restart), and keeps everything in a ledger, so
   running this again resumes instead of measuring again.
2. The loop measures: a campaign without a measure. The loop runs the baseline and each proposal
   its own way (here: it starts the embedded engine and replays one stage with the library's
   runner, and reads goodput from the stage summary), and tells the campaign what it measured:
   the same noise rule, the same ledger. A first run that clears the bar comes back as
   "pending", and ``ask()`` hands the config back for its confirming run on a fresh start.

    python examples/tuning_loop.py        # about 2.5 minutes on 2 CPUs (2 min 15 s measured), embedded engine

``main(out, requests, trials)`` takes another results folder, fewer requests per measurement and
fewer trials (the test runs it that way).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from optimizer import Budget, Campaign, Measurement, Objective, Proposal, Space, measure_on_engine
from replay.config import RunConfig, Slo
from replay.generate import GenerateConfig, generate
from replay.runner import run_stage
from replay.targets import SimEngine

OUT = Path("results/tuning_loop")


def main(out: Path = OUT, requests: int = 40, trials: int = 6) -> None:
    trace = generate(GenerateConfig(n_requests=200, seed=7, rate=12.0))
    engine = SimEngine(time_scale=0.1)  # the embedded engine, 10x faster than the modelled GPU
    # a send lag bound that a laptop or a shared 2-CPU VM keeps (the default, 1 ms, wants a quiet machine)
    run = RunConfig(url="http://127.0.0.1:0", rate=12.0, requests=requests, slo=Slo(ttft_s=1.0), lag_bound_ms=50)
    baseline = {"max_num_seqs": 2}
    space = Space.of("sim", engine.knobs, {"max_num_seqs": [2, 8, 32], "enable_prefix_caching": [True, False]})

    print("== 1. the campaign measures")
    campaign = Campaign(
        space=space,
        # with the baseline, a lossless change must answer a greedy sample as the baseline did
        measure=measure_on_engine(engine, trace, run, Objective("goodput"), baseline=baseline),
        ledger=out / "ledger.sqlite",
        identity={"engine": "sim", "example": "tuning_loop", "requests": requests},
        baseline=baseline,
        repeats=3,
        budget=Budget(trials=trials),
    )
    noise = campaign.start()
    print(
        f"baseline {noise.median:.3g} req/s ± {noise.spread:.2g}; bottleneck: {campaign.diagnosis.bottleneck} "
        f"({campaign.diagnosis.evidence})"
    )
    # the loop's own idea first, then whatever the built-in coordinate descent suggests
    mine = Proposal(
        {"max_num_seqs": 32},
        {
            "explanation": "requests queue behind a batch of 2 while the KV cache is nearly empty",
            "change": "max_num_seqs 2 -> 32",
            "prediction": "goodput rises to the offered rate",
            "falsified_by": "goodput within the baseline's noise",
        },
    )
    proposal: Proposal | None = mine
    while proposal is not None and len(campaign.result.steps) < trials:
        verdict = campaign.tell(proposal)
        print(f"{proposal.hypothesis['change']}: {verdict.kind} ({verdict.reason})")
        proposal = campaign.ask()
    print(f"best: {campaign.result.best}; ledger: {out / 'ledger.sqlite'}")
    campaign.close()

    print("== 2. the loop measures, its own way")

    def my_measure(config: dict) -> Measurement:
        """One fresh start of the engine with ``config``, one replay stage, goodput read from the
        stage summary; a stage the runner could not keep on time is no number."""
        with engine.launch(config) as running:
            summary = run_stage(trace, dataclasses.replace(run, url=running.url)).summary
        if not summary.valid:
            return Measurement(None, summary.invalid_reason)
        return Measurement(summary.goodput_rps or 0.0)

    mine_too = Campaign(
        space=space,
        ledger=out / "ledger-own.sqlite",
        baseline=baseline,
        repeats=3,
        identity={"engine": "sim", "example": "tuning_loop", "requests": requests, "measured": "own"},
    )
    noise = mine_too.start([my_measure(baseline) for _ in range(mine_too.baseline_runs_needed())])
    print(f"baseline {noise.median:.3g} req/s ± {noise.spread:.2g} (measured by the loop)")
    told = 0
    proposal = mine_too.ask()
    while proposal is not None and told < trials:
        verdict = mine_too.tell(proposal, my_measure(proposal.config))
        told += 1
        print(f"{proposal.role} {proposal.config}: {verdict.kind} ({verdict.reason})")
        proposal = mine_too.ask()
    print(f"best: {mine_too.result.best}; ledger: {out / 'ledger-own.sqlite'}")
    mine_too.close()


if __name__ == "__main__":
    main()
