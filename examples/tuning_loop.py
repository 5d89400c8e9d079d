"""Another tuning loop (an agent, a script of your own) driving the optimizer as a library.

It proposes its own configs with its own hypotheses; the campaign measures each on a freshly
started engine, checks that a lossless change answers a greedy sample as the baseline did,
judges it against the baseline's noise floor (a win must repeat on a restart), and keeps
everything in a ledger, so running this again resumes instead of measuring again.

    python examples/tuning_loop.py        # about two minutes on 2 CPUs, with the embedded engine

``main(out, requests)`` takes another results folder and fewer requests per measurement (the test
runs it that way).
"""

from __future__ import annotations

from pathlib import Path

from optimizer import Campaign, Objective, Proposal, Space, measure_on_engine
from replay.config import RunConfig, Slo
from replay.generate import GenerateConfig, generate
from replay.targets import SimEngine

OUT = Path("results/tuning_loop")


def main(out: Path = OUT, requests: int = 40) -> None:
    trace = generate(GenerateConfig(n_requests=200, seed=7, rate=12.0))
    engine = SimEngine(time_scale=0.1)  # the embedded engine, 10x faster than the modelled GPU
    # a send lag bound that a laptop or a shared 2-CPU VM keeps (the default, 1 ms, wants a quiet machine)
    run = RunConfig(url="http://127.0.0.1:0", rate=12.0, requests=requests, slo=Slo(ttft_s=1.0), lag_bound_ms=50)
    baseline = {"max_num_seqs": 2}
    campaign = Campaign(
        space=Space.of("sim", engine.knobs, {"max_num_seqs": [2, 8, 32], "enable_prefix_caching": [True, False]}),
        # with the baseline, a lossless change must answer a greedy sample as the baseline did
        measure=measure_on_engine(engine, trace, run, Objective("goodput"), baseline=baseline),
        ledger=out / "ledger.sqlite", identity={"engine": "sim", "example": "tuning_loop", "requests": requests},
        baseline=baseline, repeats=3)
    noise = campaign.start()
    print(f"baseline {noise.median:.3g} req/s ± {noise.spread:.2g}; bottleneck: {campaign.diagnosis.bottleneck} "
          f"({campaign.diagnosis.evidence})")
    # the loop's own idea first, then whatever the built-in coordinate descent suggests
    mine = Proposal({"max_num_seqs": 32}, {
        "explanation": "requests queue behind a batch of 2 while the KV cache is nearly empty",
        "change": "max_num_seqs 2 -> 32", "prediction": "goodput rises to the offered rate",
        "falsified_by": "goodput within the baseline's noise"})
    proposal: Proposal | None = mine
    while proposal is not None:
        verdict = campaign.tell(proposal)
        print(f"{proposal.hypothesis['change']}: {verdict.kind} ({verdict.reason})")
        proposal = campaign.ask()
    print(f"best: {campaign.result.best}; ledger: {out / 'ledger.sqlite'}")
    campaign.close()


if __name__ == "__main__":
    main()
