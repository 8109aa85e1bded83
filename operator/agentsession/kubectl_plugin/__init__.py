"""`kubectl agentsession` (docs/kubectl-plugin.md), shipped as one file: `make plugin` builds it with zipapp
(`build.py`). It imports only the standard library, aiohttp, kubernetes and its own modules, so that file is a
whole install. Its modules, by job:

- `names`: the project's and the chart's names it repeats, as it runs alone; `errors`: its errors, exit statuses.
- `credentials`: the kubeconfig, which session, and which token goes to the gateway over what.
- `discovery`: the gateway's Service, the port-forward to it, and URLs as people type them.
- `client`: the gateway's task dialect (requests by id, notifications in order).
- `render`: a session's journal, its table row and its description, as a person reads them.
- `terminal`: stdin, signals and the raw terminal; `conversation`: a session talked to (turns, permissions).
- `gateway_commands`: attach, prompt, history, shell; `api_commands`: suspend, resume, get, status.
- `cli`: the argument parser and `main`, the command's entry point (`__main__` for `python -m`).
"""
