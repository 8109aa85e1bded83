"""A scripted stand-in for the model APIs that real coding agents call.

Claude Code, Codex and Gemini need a model behind them; tests and demos of real agents cannot depend on a paid,
non-deterministic API. This server answers the Anthropic Messages API, the OpenAI Responses API and the Gemini
`streamGenerateContent` API with replies chosen from the latest user message (see `script`), so an agent runs
whole turns, asks for permissions and writes files exactly as it would against the real thing.
"""
