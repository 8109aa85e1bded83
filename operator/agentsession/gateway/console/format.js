// How the console words what the gateway reports: ages, startup timings, and the condition behind a status.

export function age(createdAt, now = Date.now()) {
  if (!createdAt) return "";
  const seconds = Math.max(0, Math.floor((now - Date.parse(createdAt)) / 1000));
  if (seconds < 120) return `${seconds}s`;
  if (seconds < 7200) return `${Math.floor(seconds / 60)}m`;
  if (seconds < 172800) return `${Math.floor(seconds / 3600)}h`;
  return `${Math.floor(seconds / 86400)}d`;
}

function seconds(value) {
  return typeof value === "number" ? `${value.toFixed(1)} s` : null;
}

// "3.8 s" in the list; the stages and where the pod came from on the session's page.
export function startup(cluster, { long = false } = {}) {
  const s = cluster?.startup;
  if (!s) return "";
  const total = seconds(s.initializedSeconds) ?? seconds(s.agentctlReadySeconds) ?? seconds(s.scheduledSeconds);
  if (!long) return total ? (s.source === "Claimed" ? `${total} (pool)` : total) : "";
  const stages = [
    ["scheduled", s.scheduledSeconds],
    ["agentctl ready", s.agentctlReadySeconds],
    ["agent initialized", s.initializedSeconds],
  ]
    .filter(([, v]) => typeof v === "number")
    .map(([name, v]) => `${name} ${seconds(v)}`);
  const source =
    s.source === "Claimed"
      ? `claimed from pool ${s.pool}`
      : s.reason
        ? `cold start (${s.reason}${s.message ? `: ${s.message}` : ""})`
        : s.source === "Cold"
          ? "cold start"
          : "";
  const parts = [];
  if (stages.length) parts.push(`after pod creation: ${stages.join(", ")}`);
  if (source) parts.push(source);
  return parts.join("; ");
}

export function condition(cluster, type) {
  return (cluster?.conditions || []).find((c) => c.type === type);
}

// The reason a person reads next to the phase: the failed status's error, or the Ready condition's reason and
// message while it is not True.
export function why(info, cluster) {
  if (info?.error) return info.error;
  const ready = condition(cluster, "Ready");
  if (!ready || ready.status === "True") return "";
  return ready.message ? `${ready.reason}: ${ready.message}` : ready.reason;
}

const count = new Intl.NumberFormat("en-US");

function tokens(n) {
  if (n >= 1_000_000) return `${(n / 1_000_000).toFixed(1)}M`;
  if (n >= 10_000) return `${Math.round(n / 1000)}k`;
  return count.format(n);
}

// The egress proxy's meter (status.usage): "$0.0123 · 6,540 tok" in the list; every count on the session's page.
// Tokens are input (not from cache) + cached input + output, as budgets count them.
export function usage(cluster, { long = false } = {}) {
  const u = cluster?.usage;
  if (!u) return "";
  const input = u.inputTokens || 0;
  const cached = u.cachedTokens || 0;
  const output = u.outputTokens || 0;
  const cost = `$${u.costUSD || "0"}`;
  if (!long) return `${cost} · ${tokens(input + cached + output)} tok`;
  const requests = u.requests || 0;
  return (
    `${count.format(requests)} model request${requests === 1 ? "" : "s"}, ` +
    `${count.format(input)} input + ${count.format(cached)} cached + ${count.format(output)} output tokens, ${cost}`
  );
}

// Why prompts are refused, while the BudgetExhausted condition is True; "" otherwise.
export function budget(cluster) {
  if (!cluster?.budget_exhausted) return "";
  return `Budget exhausted: ${cluster.budget_message || "a limit was reached"}. Raise spec.budget to go on.`;
}
