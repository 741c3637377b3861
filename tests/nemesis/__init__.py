"""The nemesis run: a busy fleet of real processes on a real store under a random, seeded mix of faults, and a
checker that judges the recorded history against the promised properties (docs/guarantees.md, "Nemesis run").

    make nemesis MINUTES=10 STORE=redis SEED=7      (python -m tests.nemesis --help)

Modules: :mod:`.history` (the events every process records, and reading them back), :mod:`.workload` (one
process of the fleet: a scheduler, a task worker, a producer of delayed tasks or an operator), :mod:`.servers`
(each STORE's private servers), :mod:`.faults` (the seeded fault plan and how each fault is done),
:mod:`.index` (the history indexed: fault windows, bodies, ticks), :mod:`.checker` (the properties), :mod:`.report`,
:mod:`.broken` (deliberately broken variants) and :mod:`.run` (the harness that ties them together).
"""
