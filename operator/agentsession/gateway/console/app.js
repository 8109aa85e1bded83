// The web console: sign in with a bearer token (or through an auth proxy), the sessions a person may see, and a
// session's page. It speaks the gateway's lifecycle dialect on one WebSocket; the shell has its own (terminal.js).
// Nothing is stored on the server; the token lives in this tab's sessionStorage only.

import { age, budget, startup, usage, why } from "./format.js";
import { GatewaySocket, LIFECYCLE } from "./gateway.js";
import { ShellPanel } from "./terminal.js";
import { Transcript } from "./transcript.js";

const TOKEN_KEY = "agentsession.token";
const $ = (id) => document.getElementById(id);

const app = {
  token: sessionStorage.getItem(TOKEN_KEY) || "",
  socket: null,
  agents: new Map(), // agentId → {info, cluster}
  page: null, // the open session's state, see openSession
  shell: null,
};

// ---------------------------------------------------------------- sign in

async function whoami(token) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const response = await fetch("/whoami", { headers, cache: "no-store" });
  const body = await response.json().catch(() => ({}));
  return { status: response.status, body };
}

async function signIn(token, { retries = Infinity } = {}) {
  let answer;
  try {
    answer = await whoami(token);
  } catch {
    connection("Cannot reach the gateway; retrying…", "bad");
    if (retries > 0) setTimeout(() => signIn(token, { retries: retries - 1 }), 2000);
    return;
  }
  if (answer.status === 200) {
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    app.token = token;
    $("identity").textContent = answer.body.user;
    $("sign-out").hidden = !token;
    startGateway();
    return;
  }
  if (answer.status === 503) {
    connection("The gateway is still loading sessions; retrying…", "warn");
    setTimeout(() => signIn(token, { retries }), 1000);
    return;
  }
  sessionStorage.removeItem(TOKEN_KEY);
  app.token = "";
  show("view-sign-in");
  connection("", "");
  const error = $("sign-in-error");
  error.hidden = !token && answer.status === 401;
  error.textContent = answer.body.message || `The gateway refused the token (HTTP ${answer.status}).`;
  $("token").focus();
}

$("sign-in-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const token = $("token").value.trim();
  $("token").value = "";
  signIn(token, { retries: 0 });
});

$("sign-out").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  window.location.hash = "#/";
  window.location.reload();
});

// ---------------------------------------------------------------- the lifecycle connection

function startGateway() {
  app.socket = new GatewaySocket({
    dialect: LIFECYCLE,
    token: app.token,
    onFrame,
    onState: ({ state, delay }) => {
      if (state === "open") connection("Connected", "ok");
      else if (state === "connecting") connection("Connecting…", "warn");
      else if (state === "lost") {
        connection(`Connection lost; reconnecting in ${Math.round(delay / 1000)} s…`, "bad");
        if (app.page) Object.assign(app.page, { initialized: false, initializing: false, historyRequest: null });
        renderSession();
      } else if (state === "ended") {
        // The token no longer holds (or no longer reaches this view): /whoami says which, and the sign-in
        // form shows the gateway's reason if it must be replaced.
        if (app.page) app.page.initialized = false;
        signIn(app.token, { retries: 0 });
      }
    },
  });
  app.socket.start();
  route();
}

function connection(text, tone) {
  const el = $("connection");
  el.textContent = text;
  el.dataset.tone = tone;
}

function onFrame(frame) {
  const p = frame.payload || {};
  switch (frame.type) {
    case "session_state":
      app.agents = new Map(p.agents.map((info) => [info.id, { info, cluster: p.cluster?.[info.id] || {} }]));
      renderSessions();
      renderSession();
      break;
    case "agent_status": {
      const known = app.agents.get(p.agentId);
      if (p.status === "killed") app.agents.delete(p.agentId);
      else app.agents.set(p.agentId, { info: p.info, cluster: p.cluster || known?.cluster || {} });
      renderSessions();
      if (app.page?.id === p.agentId) renderSession();
      break;
    }
    case "agent_update":
      if (app.page?.id === p.agentId && app.page.initialized) applyUpdate(p.notification?.update);
      break;
    case "agent_history":
      if (app.page?.id === p.agentId && p.requestId === app.page.historyRequest) historyPage(app.page, p);
      break;
    case "error":
      // The history stopped after its first pages (agentctl failed on the way): the page is not live.
      if (app.page && p.requestId && p.requestId === app.page.historyRequest) {
        Object.assign(app.page, { initializing: false, historyRequest: null });
        sessionError(`The history stopped: ${p.message}`);
        renderSession();
      }
      break;
    case "agent_permission_request":
      if (app.page?.id === p.agentId) addPermission(p);
      break;
    case "agent_permission_resolved":
      if (app.page?.id === p.agentId) resolvePermission(p);
      break;
  }
}

// ---------------------------------------------------------------- routing

function show(view) {
  for (const id of ["view-sign-in", "view-sessions", "view-session"]) $(id).hidden = id !== view;
}

function route() {
  if (!app.socket) return;
  const match = window.location.hash.match(/^#\/session\/([^/]+)\/([^/]+)$/);
  if (match) {
    openSession(`${decodeURIComponent(match[1])}/${decodeURIComponent(match[2])}`);
  } else {
    closeSession();
    show("view-sessions");
    renderSessions();
  }
}

window.addEventListener("hashchange", route);

// ---------------------------------------------------------------- the sessions list

function cell(label, content, className = "") {
  const td = document.createElement("td");
  td.dataset.label = label;
  if (className) td.className = className;
  if (content instanceof Node) td.append(content);
  else td.textContent = content ?? "";
  return td;
}

function badge(status) {
  const span = document.createElement("span");
  span.className = "badge";
  span.dataset.status = status;
  span.textContent = status;
  return span;
}

function renderSessions() {
  const body = $("sessions-body");
  const rows = [...app.agents.values()].map(({ info, cluster }) => {
    const tr = document.createElement("tr");
    tr.dataset.id = info.id;
    const link = document.createElement("a");
    const [ns, name] = info.id.split("/");
    link.href = `#/session/${encodeURIComponent(ns)}/${encodeURIComponent(name)}`;
    link.textContent = info.title;
    const id = document.createElement("span");
    id.className = "muted id";
    id.textContent = info.id;
    const title = document.createElement("div");
    title.append(link, id);
    tr.append(
      cell("Session", title),
      cell("Status", badge(info.status), "status"),
      cell("Phase", cluster.phase || "", "phase"),
      cell("Why", why(info, cluster), "why"),
      cell("Agent", info.type),
      cell("Age", age(info.createdAt), "age"),
      cell("Startup", startup(cluster), "startup"),
      cell("Usage", usage(cluster), cluster.budget_exhausted ? "usage exhausted" : "usage"),
    );
    return tr;
  });
  body.replaceChildren(...rows);
  $("sessions-empty").hidden = rows.length > 0;
  $("sessions-table").hidden = rows.length === 0;
}

setInterval(() => {
  for (const tr of $("sessions-body").children) {
    const entry = app.agents.get(tr.dataset.id);
    if (entry) tr.querySelector(".age").textContent = age(entry.info.createdAt);
  }
}, 10_000);

// ---------------------------------------------------------------- a session's page

function openSession(id) {
  if (app.page?.id !== id) {
    closeSession();
    app.page = {
      id,
      initialized: false,
      initializing: false,
      historyRequest: null, // the initialize whose history pages are still coming
      transcript: new Transcript(),
      elements: new Map(),
      permissions: new Map(),
    };
    $("transcript").replaceChildren();
    $("permissions").replaceChildren();
    sessionError("");
    app.shell = new ShellPanel($("terminal"), $("terminal-state"), app.token);
  }
  show("view-session");
  renderSession();
}

function closeSession() {
  app.shell?.close();
  app.shell = null;
  app.page = null;
}

const STATE_TEXT = {
  uninitialized: "Suspended and never started. Resume starts it.",
  completed: "Suspended. Resume starts a new pod and loads the history.",
  killed: "This session was deleted.",
};

function renderSession() {
  const page = app.page;
  if (!page) return;
  const entry = app.agents.get(page.id);
  const info = entry?.info;
  const cluster = entry?.cluster || {};
  const status = info?.status || (app.agents.size ? "not found" : "loading");
  $("session-title").textContent = info?.title || page.id;
  const statusBadge = $("session-status");
  statusBadge.textContent = status;
  statusBadge.dataset.status = status;

  const state = $("session-state");
  const lines = [];
  if (!app.socket?.open) lines.push(["bad", "Not connected to the gateway; the page reconnects by itself."]);
  if (status === "failed") lines.push(["bad", `Failed: ${info.error || why(info, cluster)}`]);
  else if (page.historyRequest) lines.push(["muted", "Loading the history…"]);
  else if (status === "initializing" || page.initializing) {
    const reason = why(info, cluster);
    lines.push(["warn", `Starting${cluster.phase ? ` (${cluster.phase})` : ""}${reason ? `: ${reason}` : "…"}`]);
  } else if (STATE_TEXT[status]) lines.push(["muted", STATE_TEXT[status]]);
  else if (status === "not found") lines.push(["bad", `No session ${page.id} that you may see.`]);
  const spent = budget(cluster);
  if (spent) lines.push(["bad", spent]);
  if (cluster.usage) lines.push(["muted", `Usage: ${usage(cluster, { long: true })}.`]);
  const timings = startup(cluster, { long: true });
  if (timings && (status === "ready" || status === "processing")) {
    lines.push(["muted", `Pod ${cluster.podName}: ${timings}.`]);
  }
  state.replaceChildren(
    ...lines.map(([tone, text]) => {
      const p = document.createElement("p");
      p.dataset.tone = tone;
      p.textContent = text;
      return p;
    }),
  );

  const live = app.socket?.open && page.initialized;
  const running = status === "ready" || status === "processing";
  // A spent budget refuses prompts at the gateway; raising it enables the field again, without a restart.
  $("prompt").disabled = !(live && status === "ready" && !cluster.budget_exhausted);
  $("send").disabled = $("prompt").disabled;
  $("cancel").disabled = !(live && status === "processing");
  $("suspend").disabled = !(app.socket?.open && (running || status === "initializing"));
  $("resume").hidden = !(status === "uninitialized" || status === "completed");
  $("suspend").hidden = !$("resume").hidden;
  renderModes(info, live && running);

  if (running && app.socket?.open && !page.initialized && !page.initializing) initialize();
  if (running && page.initialized && app.shell && !app.shell.agentId) app.shell.open(page.id);
}

function renderModes(info, enabled) {
  const select = $("mode");
  const modes = info?.availableModes || [];
  const wanted = modes.map((m) => m.id).join(",");
  if (select.dataset.modes !== wanted) {
    select.replaceChildren(
      ...modes.map((m) => {
        const option = document.createElement("option");
        option.value = m.id;
        option.textContent = m.name || m.id;
        option.title = m.description || "";
        return option;
      }),
    );
    select.dataset.modes = wanted;
  }
  if (info?.currentModeId) select.value = info.currentModeId;
  select.disabled = !enabled || modes.length === 0;
}

async function initialize() {
  const page = app.page;
  page.initializing = true;
  renderSession();
  let answer;
  try {
    answer = await app.socket.request({ type: "initialize_agent_request", agentId: page.id });
  } catch (err) {
    page.initializing = false;
    if (app.page === page) {
      sessionError(`Cannot open the session: ${err.message}`);
      renderSession();
    }
    return;
  }
  if (app.page !== page) return;
  // The whole history, replacing what the page showed: a reconnection never shows an update twice. It comes in
  // pages: this answer's, then `agent_history` frames of the same request until one says `next: null`.
  page.transcript = new Transcript();
  page.elements.clear();
  $("transcript").replaceChildren();
  page.historyRequest = answer.requestId;
  historyPage(page, answer);
}

function historyPage(page, { updates, next }) {
  for (const entry of updates) applyUpdate(entry.notification?.update);
  if (next !== null && next !== undefined) return;
  // The last page: the agent's live updates follow from here.
  Object.assign(page, { initialized: true, initializing: false, historyRequest: null });
  sessionError("");
  renderSession();
}

function applyUpdate(update) {
  const page = app.page;
  const entry = page.transcript.apply(update);
  if (entry) renderEntry(entry);
}

function renderEntry(entry) {
  const page = app.page;
  let li = page.elements.get(entry.index);
  if (!li) {
    li = document.createElement("li");
    page.elements.set(entry.index, li);
    $("transcript").append(li);
  }
  li.className = `entry ${entry.kind}`;
  if (entry.kind === "tool") {
    const title = document.createElement("span");
    title.className = "tool-title";
    title.textContent = entry.title;
    const status = badge(entry.status);
    li.replaceChildren(title, status);
    if (entry.text) {
      const detail = document.createElement("div");
      detail.className = "tool-detail";
      detail.textContent = entry.text;
      li.append(detail);
    }
  } else {
    li.textContent = entry.text;
  }
  const list = $("transcript");
  list.scrollTop = list.scrollHeight;
}

// ---------------------------------------------------------------- permissions

function addPermission(request) {
  const page = app.page;
  if (page.permissions.has(request.permissionId)) return;
  const card = document.createElement("div");
  card.className = "permission";
  card.setAttribute("role", "group");
  const title = request.toolCall?.title || "a tool call";
  card.setAttribute("aria-label", `Permission: ${title}`);
  const heading = document.createElement("p");
  heading.textContent = `The agent asks permission: ${title}`;
  const buttons = document.createElement("div");
  buttons.className = "options";
  for (const option of request.options || []) {
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = option.name || option.optionId;
    button.dataset.kind = option.kind || "";
    button.addEventListener("click", () => answerPermission(request, { optionId: option.optionId }, card));
    buttons.append(button);
  }
  card.append(heading, buttons);
  page.permissions.set(request.permissionId, card);
  $("permissions").append(card);
  buttons.querySelector("button")?.focus();
}

async function answerPermission(request, answer, card) {
  for (const button of card.querySelectorAll("button")) button.disabled = true;
  try {
    await app.socket.request({
      type: "agent_permission_response",
      agentId: request.agentId,
      permissionId: request.permissionId,
      ...answer,
    });
  } catch (err) {
    sessionError(`The answer was not taken: ${err.message}`);
    for (const button of card.querySelectorAll("button")) button.disabled = false;
  }
}

function resolvePermission(resolved) {
  const page = app.page;
  const card = page.permissions.get(resolved.permissionId);
  page.permissions.delete(resolved.permissionId);
  // The transcript shows only what the history holds, so a reconnection redraws it the same; the tool call's
  // status and the agent's answer tell how it went.
  card?.remove();
  $("prompt").focus();
}

// ---------------------------------------------------------------- controls

function sessionError(text) {
  const el = $("session-error");
  el.textContent = text;
  el.hidden = !text;
}

async function act(frame, what) {
  try {
    return await app.socket.request({ ...frame, agentId: app.page.id });
  } catch (err) {
    sessionError(`${what} failed: ${err.message}`);
    return null;
  }
}

$("prompt-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const prompt = $("prompt");
  const text = prompt.value.trim();
  if (!text || prompt.disabled) return;
  sessionError("");
  if (await act({ type: "send_agent_message", text }, "Sending the prompt")) prompt.value = "";
});

$("prompt").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    $("prompt-form").requestSubmit();
  }
});

$("mode").addEventListener("change", (event) => act({ type: "set_agent_mode", modeId: event.target.value }, "Switching the mode"));
$("cancel").addEventListener("click", () => act({ type: "cancel_agent_turn" }, "Cancelling the turn"));
// The shell panel stays: when the session runs again, the gateway announces the new agentctl and it reattaches.
$("suspend").addEventListener("click", () => act({ type: "suspend_agent" }, "Suspending"));
$("resume").addEventListener("click", () => {
  if (!app.page.initializing) initialize();
});

signIn(app.token);
