"""`make soak`: a long run of AgentSession churn on a real node, with invariants checked throughout and the
memory of the operator, the gateway and each agentctl sampled. `python -m benchmarks.soak --help` for the knobs.

Modules: `driver` (the run), `cycle` (one session's life through the gateway), `invariants` (what must hold, pure),
`memory` (samples and their figures, pure), `chart` (an SVG line chart, pure), `report` (what is printed and
written).
"""
