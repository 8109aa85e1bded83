"""Test doubles of the product's two outbound interfaces: `FakeKube` (an API server in memory, `fake_kube`) and
`FakeAgentctl` (an agentctl in memory, `fake_agentctl`). Product code never imports them; contract tests run the
same checks against each fake and the real thing, so they cannot drift."""
