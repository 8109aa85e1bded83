// The session's shell in xterm.js, over its own task-dialect WebSocket: `task.subscribe`, then `shell.subscribe`
// once the gateway says agentctl is ready; `shell.output` is written to the terminal, keystrokes go back as
// `shell.input`. After a reconnection the terminal is redrawn from the buffer `shell.subscribe` returns, so no
// output shows twice. Without the vendored xterm.js the panel says the terminal is unavailable.

import { GatewaySocket, TASK } from "./gateway.js";

const SUBSCRIBE_ATTEMPTS = 6;
// The gateway takes at most 64 KiB of UTF-8 in one `shell.input`: longer input (a paste) goes in pieces of this
// many UTF-16 units (at most 48 KiB), each sent once the gateway has taken the one before, in order.
const INPUT_PIECE = 16 * 1024;

function pieces(data) {
  const out = [];
  for (let start = 0; start < data.length; ) {
    let end = Math.min(start + INPUT_PIECE, data.length);
    const last = data.charCodeAt(end - 1);
    if (end < data.length && last >= 0xd800 && last <= 0xdbff) end -= 1; // not between a surrogate pair
    out.push(data.slice(start, end));
    start = end;
  }
  return out;
}

let xterm;

async function loadXterm() {
  if (xterm !== undefined) return xterm;
  try {
    const [{ Terminal }, { FitAddon }] = await Promise.all([
      import("./vendor/xterm/xterm.mjs"),
      import("./vendor/addon-fit/addon-fit.mjs"),
    ]);
    const css = document.createElement("link");
    css.rel = "stylesheet";
    css.href = "/console/vendor/xterm/xterm.css";
    document.head.append(css);
    xterm = { Terminal, FitAddon };
  } catch {
    xterm = null;
  }
  return xterm;
}

export class ShellPanel {
  constructor(container, stateLine, token) {
    this.container = container;
    this.stateLine = stateLine;
    this.token = token;
    this.socket = null;
    this.term = null;
    this.agentId = null;
    this.subscribed = false;
    this.input = Promise.resolve(); // the input sent last, which the next waits for
    this.resize = new ResizeObserver(() => this.fit?.fit());
  }

  say(text) {
    this.stateLine.textContent = text;
  }

  async open(agentId) {
    this.close();
    this.agentId = agentId;
    const lib = await loadXterm();
    if (this.agentId !== agentId) return;
    if (!lib) {
      this.say("Terminal unavailable: this gateway was built without xterm.js (make console-assets).");
      return;
    }
    this.term = new lib.Terminal({ convertEol: false, cursorBlink: true, fontSize: 13, scrollback: 2000 });
    this.fit = new lib.FitAddon();
    this.term.loadAddon(this.fit);
    this.term.open(this.container);
    this.fit.fit();
    this.resize.observe(this.container);
    this.term.onData((data) => {
      if (!this.subscribed) return;
      const socket = this.socket;
      for (const piece of pieces(data)) {
        this.input = this.input.then(() =>
          this.socket !== socket
            ? undefined
            : socket
                .request({ action: "shell.input", payload: { task_id: agentId, data: piece } })
                .catch((err) => this.say(`Input not delivered: ${err.message}`)),
        );
      }
    });
    this.say("Waiting for agentctl…");
    this.socket = new GatewaySocket({
      dialect: TASK,
      token: this.token,
      onFrame: (frame) => this.onFrame(frame),
      onState: (s) => this.onState(s),
    });
    this.socket.start();
  }

  close() {
    this.agentId = null;
    this.subscribed = false;
    this.input = Promise.resolve();
    this.resize.disconnect();
    this.socket?.stop();
    this.socket = null;
    this.term?.dispose();
    this.term = null;
    this.fit = null;
    this.container.replaceChildren();
    this.say("");
  }

  onState({ state, delay }) {
    if (state === "open") {
      this.socket
        .request({ action: "task.subscribe", payload: { task_id: this.agentId } })
        .then((answer) => {
          if (!answer.agentctl_ready) this.say("Waiting for agentctl to be ready…");
        })
        .catch((err) => this.say(`Cannot follow this session: ${err.message}`));
    } else if (state === "lost") {
      this.subscribed = false;
      this.say(`Shell connection lost; reconnecting in ${Math.round(delay / 1000)} s…`);
    } else if (state === "ended") {
      this.subscribed = false;
      this.say("The gateway ended the shell connection: your token or access no longer holds.");
    }
  }

  onFrame(frame) {
    if (frame.type !== "notification" || frame.payload?.task_id !== this.agentId) return;
    if (frame.action === "task.session.agentctl_ready") {
      this.subscribe();
    } else if (frame.action === "shell.output" && this.subscribed) {
      if (frame.payload.type === "exit") {
        this.subscribed = false;
        this.say("The shell ended.");
      } else {
        this.term.write(frame.payload.data);
      }
    }
  }

  async subscribe(attempt = 1) {
    const agentId = this.agentId;
    const socket = this.socket;
    try {
      const answer = await socket.request({ action: "shell.subscribe", payload: { task_id: agentId } });
      if (this.agentId !== agentId || !this.term) return;
      this.term.reset();
      this.term.write(answer.buffer || "");
      this.subscribed = true;
      this.say("Connected to the session's shell.");
    } catch (err) {
      if (this.agentId !== agentId || this.socket !== socket) return;
      // A new agentctl may need a moment before its shell answers; a refusal or a lost connection is final.
      const transient = ["AGENTCTL_NOT_READY", "UPSTREAM_ERROR", "TIMEOUT"].includes(err.code);
      if (transient && attempt < SUBSCRIBE_ATTEMPTS) {
        this.say(`Shell unavailable: ${err.message}; trying again…`);
        setTimeout(() => {
          if (this.agentId === agentId && this.socket === socket && !this.subscribed) this.subscribe(attempt + 1);
        }, 1000 * attempt);
      } else {
        this.say(`Shell unavailable: ${err.message}`);
      }
    }
  }
}
